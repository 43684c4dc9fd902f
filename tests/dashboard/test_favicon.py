"""A favicon, as production serves it: DEBUG=false, whitenoise and CompressedManifestStaticFilesStorage
over a real collectstatic. Every page links the SVG icon; `/favicon.ico` (which browsers ask for on
pages without a link: the admin, the API's JSON) answers 200 with an icon, not a 404."""

import re

import pytest
from django.core.management import call_command
from django.test import Client, override_settings

pytestmark = pytest.mark.django_db

PRODUCTION_STATIC = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}


@pytest.fixture
def production_static(tmp_path):
    with override_settings(DEBUG=False, STORAGES=PRODUCTION_STATIC, STATIC_ROOT=tmp_path / "static"):
        call_command("collectstatic", "--noinput", verbosity=0)
        yield Client()  # a new client builds its middleware, so whitenoise scans this STATIC_ROOT


def test_pages_link_an_svg_icon_that_whitenoise_serves(production_static, owner):
    client = production_static
    login = client.get("/login/")
    assert login.status_code == 200
    link = re.search(rb'<link rel="icon" href="([^"]+)" type="image/svg\+xml">', login.content)
    assert link, "no <link rel=icon> on the login page"
    href = link.group(1).decode()
    assert re.fullmatch(r"/static/favicon\.[0-9a-f]{12}\.svg", href), href  # the manifest's hashed name

    icon = client.get(href)
    assert icon.status_code == 200
    assert icon["Content-Type"] == "image/svg+xml"
    assert b"<svg" in b"".join(icon.streaming_content)

    client.force_login(owner)
    assert href.encode() in client.get("/jobs/").content  # the dashboard's base template too


def test_favicon_ico_answers_with_an_icon(production_static):
    response = production_static.get("/favicon.ico")
    assert response.status_code == 200
    assert response["Content-Type"] in ("image/x-icon", "image/vnd.microsoft.icon")
    body = b"".join(response.streaming_content) if response.streaming else response.content
    assert body[:4] == b"\x00\x00\x01\x00"  # the ICO header
    assert "max-age" in response["Cache-Control"]
