"""A live Chime for the SDK and CLI tests: the web process (uvicorn, production settings) on the
test database, one for all the client tests (package-scoped); each test commits its own tenant
(transactional tests), which the process reads, and which is flushed after the test.

Plain HTTP (SECURE_SSL_REDIRECT=false) so the SDK and the CLI are used exactly as a user would,
without the proxy header; private targets allowed, so jobs can deliver to 127.0.0.1."""

import itertools

import pytest
from django.core.management import call_command
from django.test import modify_settings

from chime_client import Client
from tests.support.web import start_web

LIVE_ENV = {"SECURE_SSL_REDIRECT": "false", "WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true"}
_slugs = itertools.count()


@pytest.fixture(scope="package")
def web(django_db_setup):
    from django.conf import settings

    from tests.conftest import _require

    _require("Redis", settings.REDIS_URL, 6379)
    server = start_web(name="clients-web", **LIVE_ENV)
    try:
        yield server.wait_ready()
    finally:
        server.stop()


@pytest.fixture
def tenant(transactional_db):
    from apps.tenants.services import tenant_create

    return tenant_create(slug=f"sdk-{next(_slugs)}", name="SDK tests")


@pytest.fixture
def api_key(tenant) -> str:
    from apps.tenants.services import api_key_create

    return api_key_create(tenant=tenant, name="sdk").raw_key


@pytest.fixture
def chime(web, api_key):
    with Client(web.url, api_key, max_retry_wait_seconds=2) as client:
        yield client


@pytest.fixture
def django_store(db):
    """The chime_client.contrib.django app, installed for the test only, its migration applied
    inside the test's transaction (rolled back with it): the Chime project itself is untouched."""
    with modify_settings(INSTALLED_APPS={"append": "chime_client.contrib.django"}):
        call_command("migrate", "chime_client", verbosity=0)  # the app's own migration, rolled back with the test
        from chime_client.contrib.django.store import DjangoStore

        yield DjangoStore()
