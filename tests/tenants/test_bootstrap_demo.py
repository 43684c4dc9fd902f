"""`./chime run` calls bootstrap_demo on every start: the demo key is replaced, never piled up."""

import re
from io import StringIO

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from apps.tenants.models import ApiKey
from apps.tenants.services import api_key_create

pytestmark = pytest.mark.django_db

KEY_LINE = re.compile(r"API key:\s+(chime_\S+)")


def start() -> str:
    """One `./chime run` start, as far as the demo key goes; the printed raw key."""
    out = StringIO()
    call_command("bootstrap_demo", "--url", "http://127.0.0.1:8000", stdout=out)
    return KEY_LINE.search(out.getvalue()).group(1)


def status_with(raw_key: str) -> int:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw_key}")
    return client.get("/api/v1/jobs").status_code


def test_three_starts_leave_exactly_one_active_demo_key_and_the_printed_one_works():
    printed = [start() for _ in range(3)]

    assert len(set(printed)) == 3  # a fresh key each time: the old raw key cannot be shown again
    active = ApiKey.objects.filter(tenant__slug="demo", revoked_at__isnull=True)
    assert active.count() == 1
    assert status_with(printed[-1]) == 200
    assert [status_with(key) for key in printed[:-1]] == [401, 401]


def test_keys_the_user_made_in_the_demo_tenant_survive_a_restart():
    start()
    from apps.tenants.selectors import tenant_by_slug

    own = api_key_create(tenant=tenant_by_slug("demo"), name="my script")
    start()

    assert status_with(own.raw_key) == 200
    assert sorted(ApiKey.objects.filter(tenant__slug="demo").values_list("name", flat=True)) == ["demo", "my script"]
