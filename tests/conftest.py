"""Shared fixtures. Tests run on real PostgreSQL and Redis (config/settings/test.py).

When a service is unreachable, the tests that need it are skipped with a loud reason, except in
CI (CI=true), where that is an error: a green run must mean the real parts were exercised.
"""

import os
import socket
from urllib.parse import urlparse

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from apps.tenants.selectors import signing_secrets_valid
from apps.tenants.services import api_key_create, tenant_create
from tests.api import contract
from tests.support.receiver import Receiver

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _reachable(url: str, default_port: int) -> bool:
    parsed = urlparse(url)
    try:
        with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or default_port), timeout=2):
            return True
    except OSError:
        return False


def _require(name: str, url: str, default_port: int) -> None:
    if _reachable(url, default_port):
        return
    message = f"{name} is not reachable at {url}: start it (see README) or set the URL."
    if IN_CI:
        pytest.fail(f"CI: {message}", pytrace=False)
    pytest.skip(f"!!! SKIPPED: {message}")


@pytest.fixture(scope="session", autouse=True)
def collected_static():
    """Pages render with the production static storage (config/settings/test.py), which needs the
    manifest in STATIC_ROOT: collect once, and again only when a static source changed."""
    from config.staticfiles import collect_if_stale

    collect_if_stale()


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix):
    """Runs before the test database is created: check PostgreSQL is there first."""
    db = settings.DATABASES["default"]
    _require("PostgreSQL", f"postgres://{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}", 5432)


@pytest.fixture
def redis_required():
    _require("Redis", settings.REDIS_URL, 6379)
    import redis

    redis.Redis.from_url(settings.REDIS_URL).flushdb()  # a clean broker DB for each scenario


@pytest.fixture(autouse=True)
def _api_responses_follow_the_schema(monkeypatch):
    """Every /api/v1 response a test gets from Django's test client (DRF's APIClient included) is
    checked against the OpenAPI schema: status documented, body conforming (tests/api/contract.py)."""
    contract.install(monkeypatch)


@pytest.fixture
def tenant(db):
    return tenant_create(slug="acme", name="Acme")


@pytest.fixture
def other_tenant(db):
    return tenant_create(slug="globex", name="Globex")


def _client_for(tenant) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {api_key_create(tenant=tenant).raw_key}")
    return client


@pytest.fixture
def api(tenant) -> APIClient:
    return _client_for(tenant)


@pytest.fixture
def other_api(other_tenant) -> APIClient:
    return _client_for(other_tenant)


@pytest.fixture
def receiver(tenant):
    server = Receiver(secrets=signing_secrets_valid(tenant=tenant)).start()
    yield server
    server.stop()
