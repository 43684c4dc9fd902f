"""Collected static files a production web process can serve, collected only when needed.

With DEBUG=false, `{% static %}` looks every asset up in the manifest that whitenoise's
CompressedManifestStaticFilesStorage writes to STATIC_ROOT (hashed names, served with far-future
caching); without a manifest every page is a 500 ("Missing staticfiles manifest entry"). A build
step (Heroku's Python buildpack, docker/Dockerfile) runs collectstatic, but a Procfile deploy
without one (honcho on a VM, a release phase on a dyno whose disk is thrown away) has no
manifest, and a checkout updated in place has a stale one. So the Procfile's web process runs
`manage.py collectstatic_if_stale` before uvicorn: a no-op when STATIC_ROOT matches the sources
(docs/operations.md#deploying).
"""

import contextlib
import fcntl
import filecmp
import hashlib
import json
import os
import tempfile
import time
from pathlib import Path

from django.apps import apps
from django.conf import settings
from django.contrib.staticfiles.finders import get_finders
from django.contrib.staticfiles.storage import staticfiles_storage
from django.core.management import call_command
from django.utils.functional import empty
from django.utils.module_loading import import_string


def static_sources() -> dict[str, str]:
    """Every file collectstatic collects, as {name under STATIC_ROOT: source path}; the first finder
    that has a name wins, as in collectstatic."""
    ignore = apps.get_app_config("staticfiles").ignore_patterns
    found: dict[str, str] = {}
    for finder in get_finders():
        for path, storage in finder.list(ignore):
            prefix = getattr(storage, "prefix", None)
            found.setdefault(os.path.join(prefix, path) if prefix else path, storage.path(path))
    return found


def stale_reason() -> str | None:
    """Why STATIC_ROOT cannot serve the current sources, or None when it can.

    Compares content, not modification times (a fresh checkout or an image layer has its own):
    every source needs its manifest entry, its hashed file, and an identical unhashed copy (which
    collectstatic keeps beside the hashed one); a changed image changes the hashed names of the CSS
    that refer to it, so any changed file means collecting again."""
    root = Path(settings.STATIC_ROOT)
    storage_class = import_string(settings.STORAGES["staticfiles"]["BACKEND"])
    manifest_name = getattr(storage_class, "manifest_name", None)
    paths = {}
    if manifest_name:
        manifest = root / manifest_name
        if not manifest.is_file():
            return f"no manifest at {manifest}"
        paths = json.loads(manifest.read_text()).get("paths", {})
    for name, source in static_sources().items():
        if manifest_name and name not in paths:
            return f"{name} is not in the manifest"
        if manifest_name and not (root / paths[name]).is_file():
            return f"{paths[name]} is missing"
        copy = root / name
        if not copy.is_file() or not filecmp.cmp(source, copy, shallow=False):
            return f"{name} changed"
    return None


def _remove_changed_copies() -> None:
    """collectstatic skips a file whose copy is not older than its source (to the second), so a
    source edited within a second of the last run, or unpacked with an old mtime, would stay stale:
    remove the copies that differ and it copies them again."""
    root = Path(settings.STATIC_ROOT)
    for name, source in static_sources().items():
        copy = root / name
        if copy.is_file() and not filecmp.cmp(source, copy, shallow=False):
            copy.unlink()


@contextlib.contextmanager
def _collect_lock():
    """One collector at a time per STATIC_ROOT on this machine (several web processes may start at
    once). The lock lives in the temp dir: STATIC_ROOT's parent may be read-only (a Docker image)."""
    digest = hashlib.sha256(str(settings.STATIC_ROOT).encode()).hexdigest()[:16]
    path = Path(tempfile.gettempdir()) / f"chime-collectstatic-{digest}.lock"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
    except OSError:
        yield  # no lock to be had: collecting twice is slower, not wrong
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def collect_if_stale() -> str:
    """Run collectstatic unless STATIC_ROOT already serves the current sources; says what it did."""
    if settings.DEBUG:
        return "DEBUG is on: static files are served from their sources, not collected."
    if stale_reason() is None:
        return f"Static files in {settings.STATIC_ROOT} are current."
    with _collect_lock():
        reason = stale_reason()  # another process may have collected while this one waited
        if reason is None:
            return f"Static files in {settings.STATIC_ROOT} are current."
        started = time.monotonic()
        _remove_changed_copies()
        call_command("collectstatic", interactive=False, verbosity=0)
        staticfiles_storage._wrapped = empty  # this process reads the new manifest from now on
        return f"Collected static files into {settings.STATIC_ROOT} in {time.monotonic() - started:.1f} s ({reason})."
