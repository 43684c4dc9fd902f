"""The real stack for browser tests: uvicorn serving config.asgi (HTTP + WebSockets), the scheduler,
a Celery worker, and headless Debian Chromium driven by Playwright's sync API.

Chromium is never downloaded (`playwright install` cannot work here): /usr/bin/chromium is used
through `executable_path`. When it is missing the tests are skipped loudly, or fail with CI=true.
"""

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support.processes import ROOT, Process, process_env

CHROMIUM = Path(os.environ.get("CHIME_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-quic",
    "--disable-sync",
]
SCREENSHOTS = ROOT / "test-output" / "screenshots"

# The history of a run's status as the page shows it, recorded by a MutationObserver in the page.
WATCH_STATUSES = """(runId) => {
  window.__statuses = [];
  const record = () => {
    const row = document.getElementById('run-' + runId);
    const status = row && row.dataset.status;
    if (status && window.__statuses[window.__statuses.length - 1] !== status) window.__statuses.push(status);
  };
  record();
  new MutationObserver(record).observe(document.body, {subtree: true, childList: true, attributes: true});
}"""
PASSWORD = "pw-Chime-2026!"
# Short leases and sweeps, as in the scenario tests.
FAST = {
    "CHIME_RUN_LEASE_SECONDS": "3",
    "CHIME_RUN_LEASE_RENEW_SECONDS": "1",
    "CHIME_SWEEP_INTERVAL_SECONDS": "1",
    "CHIME_REQUEUE_AFTER_SECONDS": "10",
}


def require_chromium() -> None:
    if CHROMIUM.exists():
        return
    from tests.conftest import IN_CI

    message = f"Chromium is not installed at {CHROMIUM} (apt-get install chromium)."
    if IN_CI:
        pytest.fail(f"CI: {message}", pytrace=False)
    pytest.skip(f"!!! SKIPPED: {message}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_web(port: int, **env: str) -> Process:
    env = process_env(**{**FAST, **env})
    # As the Procfile's web process: collect only when STATIC_ROOT is stale. A plain collectstatic
    # re-saved the checkout's hashed files under the other shard's test clients, whose whitenoise
    # scans STATIC_ROOT when it starts (FileNotFoundError for a file being rewritten, in CI).
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic_if_stale"],
        cwd=ROOT,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    args = [sys.executable, "-m", "uvicorn", "config.asgi:application", "--host", "127.0.0.1", "--port", str(port)]
    process = Process("web", args, env)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                return process
        except OSError:
            if process.popen.poll() is not None:
                raise RuntimeError(f"web exited:\n{process.log()[-3000:]}") from None
            time.sleep(0.2)
    process.stop()
    raise TimeoutError(f"web did not answer within 30 s:\n{process.log()[-3000:]}")


def screenshot(page, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def api_status(base_url: str, raw_key: str, path: str = "/api/v1/jobs") -> int:
    request = urllib.request.Request(f"{base_url}{path}", headers={"Authorization": f"Bearer {raw_key}"})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310 (loopback)
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


@contextlib.contextmanager
def chromium():
    """Debian's Chromium through Playwright's sync API. That API keeps an event loop running in
    this thread; the test's own ORM calls (setup and assertions) are plain sync code all the same,
    so Django's async-safety check is lifted for as long as the browser is open."""
    from playwright.sync_api import sync_playwright

    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            yield browser
            browser.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous
