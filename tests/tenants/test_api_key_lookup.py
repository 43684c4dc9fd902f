"""API key authentication's lookup (apps/tenants/selectors.py): the written-out SQL loads exactly
what the ORM's select_related did, refuses revoked and unknown keys, and costs no further query
for the tenant or its limits."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.tenants.models import ApiKey, TenantLimits
from apps.tenants.selectors import api_key_authenticate
from apps.tenants.services import api_key_create, hash_api_key

pytestmark = pytest.mark.django_db


def orm_lookup(raw_key: str) -> ApiKey | None:
    return (
        ApiKey.objects.select_related("tenant", "tenant__limits")
        .filter(key_hash=hash_api_key(raw_key), revoked_at__isnull=True)
        .first()
    )


def fields(instance) -> dict:
    return {f.attname: getattr(instance, f.attname) for f in type(instance)._meta.concrete_fields}


@pytest.mark.parametrize("with_limits", [False, True])
def test_it_loads_what_the_orm_loads_with_relations_cached(tenant, with_limits):
    if with_limits:
        TenantLimits.objects.create(tenant=tenant, max_jobs=7, api_rate_limit="10/min")
    raw = api_key_create(tenant=tenant, name="ci").raw_key
    api_key_authenticate(raw)  # records last_used_at, so both lookups below read the same row
    expected = orm_lookup(raw)
    with CaptureQueriesContext(connection) as queries:
        found = api_key_authenticate(raw)
        tenant_fields, limits = fields(found.tenant), found.tenant.limits if with_limits else None
        if not with_limits:
            with pytest.raises(TenantLimits.DoesNotExist):
                found.tenant.limits  # noqa: B018 (cached as absent: raises without a query)
    assert len(queries.captured_queries) == 1, [q["sql"] for q in queries.captured_queries]
    assert fields(found) == fields(expected)
    assert tenant_fields == fields(expected.tenant)
    if with_limits:
        assert fields(limits) == fields(expected.tenant.limits)
        assert limits.tenant is found.tenant
    assert found._state.adding is False and found._state.db == "default"


def test_revoked_and_unknown_keys_are_refused(tenant):
    created = api_key_create(tenant=tenant)
    assert api_key_authenticate(created.raw_key + "x") is None
    ApiKey.objects.filter(pk=created.api_key.pk).update(revoked_at=timezone.now())
    assert api_key_authenticate(created.raw_key) is None
