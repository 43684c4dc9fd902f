"""A client error is logged once, and never at ERROR. The web server's access log (uvicorn) already has
one line per request with its status; Django must not add a WARNING of its own for every 4xx
("Bad Request: /api/v1/jobs"), nor an ERROR with a traceback for a request that only carried a bad
Host header. A server error still is an ERROR with its traceback.

What the console shows is read from the handler that settings.LOGGING installs (its stream swapped for
a buffer), since a filter on that handler does not show in caplog."""

import io
import logging
import os
import subprocess
import sys

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import include, path

from apps.tenants.models import Membership, Role
from tests.support.processes import ROOT

pytestmark = [pytest.mark.django_db, pytest.mark.urls(__name__)]


def boom(request):
    raise RuntimeError("a bug, not the client's fault")


urlpatterns = [path("boom", boom), path("", include("config.urls"))]


@pytest.fixture
def console():
    handler = next(h for h in logging.getLogger().handlers if h.name == "console")
    stream = io.StringIO()
    previous = handler.setStream(stream)
    yield stream
    handler.setStream(previous)


def warnings_and_worse(caplog) -> list[str]:
    return [f"{r.levelname} {r.name} {r.getMessage()}" for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_bad_api_request_is_logged_by_nobody_but_the_access_log(api, caplog, console):
    caplog.set_level(logging.INFO)
    assert api.post("/api/v1/jobs", {"name": ""}, format="json").status_code == 400
    assert api.generic("POST", "/api/v1/jobs", "{bad", content_type="application/json").status_code == 400
    assert Client().get("/api/v1/jobs").status_code == 401

    assert warnings_and_worse(caplog) == []
    assert console.getvalue() == ""


def test_a_bad_dashboard_form_likewise(tenant, caplog, console):
    user = get_user_model().objects.create_user(username="o@acme.test", password="pw-Chime-2026!")
    Membership.objects.create(user=user, tenant=tenant, role=Role.OWNER)
    client = Client()
    client.force_login(user)
    caplog.set_level(logging.INFO)

    assert client.post("/keys/new/", {"name": "x" * 101}).status_code == 400
    assert client.get("/no-such-page/").status_code == 404

    assert warnings_and_worse(caplog) == []
    assert console.getvalue() == ""


def test_a_disallowed_host_is_one_warning_with_the_reason_and_no_traceback(console):
    assert Client().get("/login/", HTTP_HOST="evil.example").status_code == 400

    lines = console.getvalue().splitlines()
    assert len(lines) == 1, lines
    assert "WARNING django.security.DisallowedHost Invalid HTTP_HOST header: 'evil.example'" in lines[0]


def test_a_server_error_is_still_an_error_with_its_traceback(console):
    assert Client(raise_request_exception=False).get("/boom").status_code == 500

    output = console.getvalue()
    assert "ERROR django.request Internal Server Error: /boom" in output
    assert "Traceback" in output and "a bug, not the client's fault" in output


def test_with_debug_on_too_django_logs_through_the_one_console_handler():
    """`./chime run` sets DEBUG=true, where Django's default logging adds a console handler of its own
    to the "django" logger: every django.* record was printed twice, a bad Host with its traceback."""
    script = (
        "import django; django.setup()\n"
        "from django.test import Client\n"
        "assert Client().get('/login/', HTTP_HOST='evil.example').status_code == 400\n"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings.base", "DEBUG": "true",
           "DATABASE_URL": "sqlite:///:memory:", "REDIS_URL": ""}  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )

    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert "WARNING django.security.DisallowedHost Invalid HTTP_HOST header: 'evil.example'" in lines[0]
