"""config/staticfiles.py: the web process collects static files when STATIC_ROOT lacks the manifest
or no longer matches the sources, and leaves a current STATIC_ROOT alone (a read-only image)."""

import pytest
from django.contrib.staticfiles.storage import staticfiles_storage
from django.test import override_settings

from config.staticfiles import collect_if_stale, stale_reason


@pytest.fixture
def static(tmp_path):
    """A small static tree of its own (one finder, two files) and an empty STATIC_ROOT."""
    sources = tmp_path / "static"
    (sources / "app").mkdir(parents=True)
    (sources / "app" / "logo.svg").write_text("<svg xmlns='http://www.w3.org/2000/svg'/>")
    (sources / "app" / "app.css").write_text("body { background: url('logo.svg'); }\n")
    with override_settings(
        DEBUG=False,
        STATIC_ROOT=tmp_path / "collected",
        STATICFILES_DIRS=[sources],
        STATICFILES_FINDERS=["django.contrib.staticfiles.finders.FileSystemFinder"],
    ):
        yield sources


def test_without_a_manifest_the_files_are_collected_and_urls_get_hashed_names(static):
    assert stale_reason().startswith("no manifest")
    assert collect_if_stale().startswith("Collected static files")
    assert stale_reason() is None
    url = staticfiles_storage.url("app/app.css")
    assert url != "/static/app/app.css" and url.startswith("/static/app/app.") and url.endswith(".css")


def test_a_current_static_root_is_left_alone(static, settings):
    collect_if_stale()
    manifest = settings.STATIC_ROOT / "staticfiles.json"
    before = manifest.stat().st_mtime_ns
    assert collect_if_stale().endswith("are current.")
    assert manifest.stat().st_mtime_ns == before


def test_a_changed_file_is_collected_again_and_so_is_the_css_that_refers_to_it(static):
    collect_if_stale()
    css_before = staticfiles_storage.url("app/app.css")
    (static / "app" / "logo.svg").write_text("<svg xmlns='http://www.w3.org/2000/svg'><rect/></svg>")
    assert stale_reason() == "app/logo.svg changed"
    collect_if_stale()
    assert stale_reason() is None
    assert staticfiles_storage.url("app/app.css") != css_before  # its url('logo.svg') now has the new hash


def test_a_new_file_is_collected(static):
    collect_if_stale()
    (static / "app" / "new.js").write_text("console.log('new')\n")
    assert stale_reason() == "app/new.js is not in the manifest"
    collect_if_stale()
    assert staticfiles_storage.url("app/new.js").startswith("/static/app/new.")


def test_with_debug_nothing_is_collected(static, settings):
    settings.DEBUG = True
    assert collect_if_stale().startswith("DEBUG is on")
    assert not (settings.STATIC_ROOT / "staticfiles.json").exists()
