"""Reads for tenants and their credentials."""

import functools
from datetime import timedelta

from django.db import connection
from django.db.models import F, Q
from django.utils import timezone

from apps.core.prepared import id_array, prepared_cursor

from .models import ApiKey, SigningSecret, Tenant, TenantLimits
from .services import hash_api_key

# Writing last_used_at on every request would turn each API read into a write.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def api_key_authenticate(raw_key: str) -> ApiKey | None:
    """The active key matching `raw_key`, with its tenant and the tenant's limits (the rate limit
    reads them on every request); records when it was last used."""
    key_hash = hash_api_key(raw_key)
    if connection.vendor == "postgresql":
        api_key = _active_key_by_hash(key_hash)
    else:
        api_key = (
            ApiKey.objects.select_related("tenant", "tenant__limits")
            .filter(key_hash=key_hash, revoked_at__isnull=True)
            .first()
        )
    if api_key is not None:
        now = timezone.now()
        if api_key.last_used_at is None or now - api_key.last_used_at > LAST_USED_RESOLUTION:
            ApiKey.objects.filter(pk=api_key.pk).update(last_used_at=now)
            api_key.last_used_at = now
    return api_key


@functools.cache
def _key_lookup() -> tuple[str, list[list[str]]]:
    """The SQL of the ORM query above (`select_related("tenant", "tenant__limits")`, written out
    once) and each model's column names in its order. Compiling that three-table ORM query cost
    0.9 CPU-ms on every API request, against 0.02 ms for sending one written out."""
    models = (ApiKey, Tenant, TenantLimits)
    names = [[field.attname for field in model._meta.concrete_fields] for model in models]
    columns = ", ".join(
        f'{alias}."{field.column}"'
        for alias, model in zip("ktl", models, strict=True)
        for field in model._meta.concrete_fields
    )
    # Table and column names come from the models' metadata; the hash is a parameter.
    sql = (
        f"SELECT {columns} FROM {ApiKey._meta.db_table} k "  # noqa: S608
        f"JOIN {Tenant._meta.db_table} t ON t.id = k.tenant_id "
        f"LEFT JOIN {TenantLimits._meta.db_table} l ON l.tenant_id = k.tenant_id "
        "WHERE k.key_hash = %s AND k.revoked_at IS NULL LIMIT 1"
    )
    return sql, names


def _active_key_by_hash(key_hash: str) -> ApiKey | None:
    """The key, its tenant and the tenant's limits (None when it has no override row), as the
    ORM's select_related would load them (relations cached, so reading them costs no query).
    PostgreSQL only: psycopg returns these columns' Python types as the ORM would (no converter
    is involved for uuid, text, integer and timestamptz)."""
    sql, names = _key_lookup()
    with connection.cursor() as cursor:
        cursor.execute(sql, [key_hash])
        row = cursor.fetchone()
    if row is None:
        return None
    key_count, tenant_count = len(names[0]), len(names[1])
    api_key = ApiKey.from_db("default", names[0], row[:key_count])
    tenant = Tenant.from_db("default", names[1], row[key_count : key_count + tenant_count])
    limits_row = row[key_count + tenant_count :]
    has_limits = limits_row[names[2].index(TenantLimits._meta.pk.attname)] is not None  # LEFT JOIN: NULLs without a row
    limits = TenantLimits.from_db("default", names[2], limits_row) if has_limits else None
    ApiKey._meta.get_field("tenant").set_cached_value(api_key, tenant)
    Tenant._meta.get_field("limits").set_cached_value(tenant, limits)
    if limits is not None:
        TenantLimits._meta.get_field("tenant").set_cached_value(limits, tenant)
    return api_key


# One statement of fixed text: the worker reads the secrets once per claim, and the queryset it
# replaced cost ~1.4 ms of Python per call to build (bench/delivery_stages.py --hosts 1, issue #12).
SECRETS_BY_TENANT_SQL = """
SELECT tenant_id, secret FROM tenants_signingsecret
 WHERE tenant_id = ANY(%s::uuid[]) AND (expires_at IS NULL OR expires_at > %s)
 ORDER BY tenant_id, expires_at ASC NULLS FIRST, created_at DESC"""


def signing_secrets_by_tenant(tenant_ids) -> dict:
    """For each tenant, the secrets every delivery is signed with: the current one first, then
    unexpired old ones (during a rotation). One query for a whole batch of runs."""
    now = timezone.now()
    ids = sorted({str(tenant_id) for tenant_id in tenant_ids})
    if connection.vendor == "postgresql":
        with prepared_cursor() as cursor:
            cursor.execute(SECRETS_BY_TENANT_SQL, [id_array(ids), now])
            rows = cursor.fetchall()
    else:
        rows = (
            SigningSecret.objects.filter(tenant_id__in=ids)
            .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
            .order_by("tenant_id", F("expires_at").asc(nulls_first=True), "-created_at")
            .values_list("tenant_id", "secret")
        )
    secrets: dict = {}
    for tenant_id, secret in rows:
        secrets.setdefault(tenant_id, []).append(secret)
    return secrets


def signing_secrets_valid(*, tenant: Tenant) -> list[str]:
    return signing_secrets_by_tenant([tenant.id]).get(tenant.id, [])


def signing_secret_current(*, tenant: Tenant) -> SigningSecret:
    return SigningSecret.objects.for_tenant(tenant).get(expires_at__isnull=True)


def tenant_by_slug(slug: str) -> Tenant | None:
    return Tenant.objects.filter(slug=slug).first()


def api_key_list(*, tenant: Tenant):
    return ApiKey.objects.for_tenant(tenant).order_by("-created_at")


def api_key_get(*, tenant: Tenant, api_key_id) -> ApiKey:
    return ApiKey.objects.for_tenant(tenant).get(pk=api_key_id)
