"""Reads for tenants and their credentials."""

from datetime import timedelta

from django.db.models import F, Q
from django.utils import timezone

from .models import ApiKey, SigningSecret, Tenant
from .services import hash_api_key

# Writing last_used_at on every request would turn each API read into a write.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def api_key_authenticate(raw_key: str) -> ApiKey | None:
    """The active key matching `raw_key`, with its tenant and the tenant's limits (the rate limit
    reads them on every request); records when it was last used."""
    api_key = (
        ApiKey.objects.select_related("tenant", "tenant__limits")
        .filter(key_hash=hash_api_key(raw_key), revoked_at__isnull=True)
        .first()
    )
    if api_key is not None:
        now = timezone.now()
        if api_key.last_used_at is None or now - api_key.last_used_at > LAST_USED_RESOLUTION:
            ApiKey.objects.filter(pk=api_key.pk).update(last_used_at=now)
            api_key.last_used_at = now
    return api_key


def signing_secrets_by_tenant(tenant_ids) -> dict:
    """For each tenant, the secrets every delivery is signed with: the current one first, then
    unexpired old ones (during a rotation). One query for a whole batch of runs."""
    now = timezone.now()
    rows = (
        SigningSecret.objects.filter(tenant_id__in=set(tenant_ids))
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
