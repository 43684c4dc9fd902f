"""API keys (raw key shown once, revoke -> the API refuses it) and the signing secret."""

import pytest
from rest_framework.test import APIClient

from apps.tenants.models import ApiKey, SigningSecret
from apps.tenants.services import api_key_create

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


def test_create_shows_the_raw_key_once_and_it_works_on_the_api(owner_client, tenant):
    html = owner_client.post("/keys/new/", {"name": "CI deploys"}, **HTMX).content.decode()
    key = ApiKey.objects.get(tenant=tenant, name="CI deploys")
    raw = html.split('id="new-key" type="text" readonly value="')[1].split('"')[0]
    assert raw.startswith(key.prefix + "_")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert api.get("/api/v1/jobs").status_code == 200
    page = owner_client.get("/keys/").content.decode()
    assert raw not in page and f"{key.prefix}…" in page  # listed by prefix, never again in full


def test_keys_are_listed_with_last_use(owner_client, tenant):
    created = api_key_create(tenant=tenant, name="used")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {created.raw_key}")
    api.get("/api/v1/jobs")
    html = owner_client.get("/keys/").content.decode()
    assert "used" in html and "never" not in html.split(created.api_key.prefix)[1].split("</tr>")[0]


def test_revoke_makes_the_api_refuse_the_key(owner_client, tenant):
    created = api_key_create(tenant=tenant, name="old")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {created.raw_key}")
    assert api.get("/api/v1/jobs").status_code == 200
    html = owner_client.post(f"/keys/{created.api_key.id}/revoke/", **HTMX).content.decode()
    assert "revoked" in html
    assert api.get("/api/v1/jobs").status_code == 401


def test_signing_secret_is_revealed_on_request_and_rotated(owner_client, tenant):
    assert "whsec_" not in owner_client.get("/keys/").content.decode()
    current = SigningSecret.objects.get(tenant=tenant, expires_at__isnull=True)
    html = owner_client.get("/signing-secret/", **HTMX).content.decode()
    assert current.secret in html
    html = owner_client.post("/signing-secret/rotate/", **HTMX).content.decode()
    fresh = SigningSecret.objects.get(tenant=tenant, expires_at__isnull=True)
    assert fresh.secret != current.secret and fresh.secret in html and "Rotated" in html
    current.refresh_from_db()
    assert current.expires_at is not None  # still signing for 24 hours


def test_key_form_errors_are_shown(owner_client):
    response = owner_client.post("/keys/new/", {"name": "x" * 101})
    assert response.status_code == 400
    assert "at most 100 characters" in response.content.decode()
