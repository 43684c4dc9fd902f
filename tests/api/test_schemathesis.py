"""Property-based fuzzing of the whole API against its own OpenAPI schema (schemathesis).

Every operation gets a bounded number of generated requests, valid and invalid; none may answer
5xx, and every response must match the schema (status code documented, body conforming).
"""

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import positive_data_acceptance

from apps.tenants.services import api_key_create, tenant_create
from config.wsgi import application

schema = schemathesis.openapi.from_wsgi("/api/v1/schema", application)


@pytest.fixture(autouse=True)
def _keep_the_test_connection():
    """Calls go through the raw WSGI app, whose request signals would close the test transaction's
    connection (Django's own test client unhooks them the same way)."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def auth_headers(db):
    tenant = tenant_create(slug="fuzz")
    return {"Authorization": f"Bearer {api_key_create(tenant=tenant).raw_key}"}


@pytest.mark.timeout(300)
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@schema.parametrize()
def test_api_conforms_to_its_schema(case, auth_headers):
    # positive_data_acceptance is left out on purpose: a schema cannot say which strings are valid
    # cron expressions, zones or public URLs, so a schema-valid body can rightly get a 400.
    case.call_and_validate(headers=auth_headers, excluded_checks=[positive_data_acceptance])
