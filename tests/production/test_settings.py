"""Production settings: what a deploy gets with nothing set, `check --deploy`, and HTTPS behind a
TLS-terminating proxy (Django's own X-Forwarded-Proto handling, as from a proxy that is not on
loopback, where uvicorn would not rewrite the scheme itself)."""

import importlib
import re
import secrets
import subprocess

import pytest
from django.conf import settings
from django.test import Client, override_settings

from tests.support.processes import ROOT

from .deploy import deploy_env

SECURITY_SETTINGS = [
    "SECURE_PROXY_SSL_HEADER",
    "SECURE_SSL_REDIRECT",
    "SESSION_COOKIE_SECURE",
    "CSRF_COOKIE_SECURE",
    "SECURE_HSTS_SECONDS",
]


def _manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    """manage.py as a deploy runs it: no DJANGO_SETTINGS_MODULE, DEBUG unset, a real SECRET_KEY."""
    return subprocess.run(
        ["python", "manage.py", *args],
        cwd=ROOT,
        env=deploy_env(SECRET_KEY=secrets.token_urlsafe(50), **env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_deploy_gets_the_production_settings_without_setting_anything():
    result = _manage("shell", "-c", "from django.conf import settings; print(settings.SETTINGS_MODULE)")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "config.settings.production"
    for module in ("config/asgi.py", "config/wsgi.py", "config/celery.py", "manage.py"):
        assert 'setdefault("DJANGO_SETTINGS_MODULE", "config.settings.production")' in (ROOT / module).read_text()


def test_check_deploy_warns_only_about_the_hsts_choices_left_to_the_operator():
    result = _manage("check", "--deploy")
    assert result.returncode == 0, result.stderr
    assert set(re.findall(r"\((security\.W\d+)\)", result.stderr + result.stdout)) == {"security.W005", "security.W021"}

    opted_in = _manage("check", "--deploy", SECURE_HSTS_INCLUDE_SUBDOMAINS="true", SECURE_HSTS_PRELOAD="true")
    assert opted_in.returncode == 0, opted_in.stderr
    assert "System check identified no issues" in opted_in.stdout, opted_in.stdout + opted_in.stderr


def test_the_tests_use_the_static_storage_of_production():
    production = importlib.import_module("config.settings.production")
    assert settings.STORAGES == production.STORAGES
    assert "Manifest" in settings.STORAGES["staticfiles"]["BACKEND"]


@pytest.fixture
def behind_proxy():
    production = importlib.import_module("config.settings.production")
    with override_settings(**{name: getattr(production, name) for name in SECURITY_SETTINGS}):
        yield Client()  # a new client loads the middleware with these settings


@pytest.mark.django_db
def test_plain_http_is_redirected_to_https_but_not_the_health_checks(behind_proxy):
    response = behind_proxy.get("/jobs/")
    assert response.status_code == 301 and response["Location"] == "https://testserver/jobs/"
    health = behind_proxy.get("/healthz")
    assert health.status_code == 200 and health.json() == {"status": "ok"}
    ready = behind_proxy.get("/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"


@pytest.mark.django_db
def test_health_checks_answer_a_probe_that_addresses_the_pods_ip(behind_proxy):
    """An orchestrator probes http://<pod ip>:<port>/readyz: that Host is not in ALLOWED_HOSTS,
    which must not turn the probe into a 400 (every other path still refuses it)."""
    assert behind_proxy.get("/jobs/", headers={"Host": "10.1.2.3:8000"}).status_code == 400
    assert behind_proxy.get("/healthz", headers={"Host": "10.1.2.3:8000"}).status_code == 200
    assert behind_proxy.get("/readyz", headers={"Host": "10.1.2.3:8000"}).status_code == 200


@pytest.mark.django_db
def test_requests_the_proxy_forwarded_over_https_are_served_with_hsts_and_secure_cookies(behind_proxy):
    response = behind_proxy.get("/login/", headers={"X-Forwarded-Proto": "https"})
    assert response.status_code == 200
    assert response["Strict-Transport-Security"].startswith("max-age=")
    assert response.cookies["csrftoken"]["secure"] is True
