"""Issue #15's acceptance, end to end on a real Chime (web, scheduler, Celery worker):

create a cron job (SDK), preview it (CLI), trigger it (CLI); `chimectl listen` (a subprocess)
receives the delivery and verifies it with the tenant's signing secret; the run is listed (CLI)
and, having failed against a listener answering 500, replayed (CLI) to a second listener, which
verifies it and handles it; the same delivery sent again (same body, same headers) is dropped by
the receiver toolkit's dedupe: acknowledged with 200, not handled again.
"""

import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from chime_client import Client
from chime_client.cli import app, output
from tests.support.processes import start_scheduler, start_worker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.timeout(180)]

SRC = Path(__file__).resolve().parents[1] / "src"


class Listener:
    """`python -m chime_client.cli listen --json` in its own process; reads its JSON lines."""

    def __init__(self, url: str, api_key: str, *args: str):
        env = {**os.environ, "CHIME_URL": url, "CHIME_API_KEY": api_key, "PYTHONPATH": str(SRC)}
        command = [sys.executable, "-m", "chime_client.cli", "listen", "--port", "0", "--json", *args]
        self.process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.url = self.next(timeout=30)["listening"]

    def _read(self):
        for line in self.process.stdout:
            self.lines.put(line)

    def next(self, timeout: float = 60) -> dict:
        line = self.lines.get(timeout=timeout)
        try:
            return json.loads(line)
        except ValueError:
            raise AssertionError(f"listen printed {line!r}") from None

    def stop(self):
        self.process.terminate()
        self.process.wait(10)


@pytest.fixture
def stack(web, transactional_db):
    """A worker and the scheduler beside the module's web process; stopped before the flush."""
    processes = [start_worker(queues="runs.high,runs.default,runs.low", concurrency=1), start_scheduler()]
    yield web
    for process in processes:
        process.stop()


@pytest.fixture
def listeners(stack, api_key):
    started = []

    def start(*args):
        started.append(Listener(stack.url, api_key, *args))
        return started[-1]

    yield start
    for listener in started:
        listener.stop()


def test_a_cron_job_from_the_sdk_and_the_cli_to_a_verified_deduplicated_delivery(
    stack, api_key, listeners, monkeypatch
):
    monkeypatch.setenv("CHIME_URL", stack.url)
    monkeypatch.setenv("CHIME_API_KEY", api_key)
    monkeypatch.setattr(output.console, "width", 200)
    runner = CliRunner()

    def cli(*args):
        result = runner.invoke(app, list(args), catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.output

    failing = listeners("--status", "500")
    chime = Client(stack.url, api_key)
    job = chime.jobs.create(
        name="nightly",
        schedule={"type": "cron", "expression": "30 2 * * *", "timezone": "Europe/Berlin"},
        target={"url": f"{failing.url}/hook", "body": {"report": "nightly"}},
        retry={"max_attempts": 1, "initial_backoff_seconds": 5, "max_backoff_seconds": 5},
    )

    preview = cli("preview", "30 2 * * *", "--tz", "Europe/Berlin", "--count", "3", "--start", "2026-03-28T00:00:00Z")
    gap_night = next(line for line in preview.splitlines() if "2026-03-29" in line)
    assert "DST gap" in gap_night  # 02:30 does not exist that night in Berlin

    run = json.loads(cli("--json", "jobs", "trigger", job["id"]))
    first = failing.next()
    assert (first["outcome"], first["webhook_id"], first["status"]) == ("delivered", run["id"], 500)
    assert first["verified"] and first["body"] == {"report": "nightly"} and first["attempt"] == "1"
    watched = cli("runs", "get", run["id"], "--watch", "--interval", "0.2")
    assert "failed" in watched
    assert run["id"] in cli("runs", "list", "--job", job["id"], "--status", "failed")

    # The endpoint is fixed: the job points at a listener that answers 200, the run is replayed.
    working = listeners()
    chime.jobs.update(job["id"], target={"url": f"{working.url}/hook", "body": {"report": "nightly"}})
    cli("runs", "replay", run["id"])
    second = working.next()
    assert (second["outcome"], second["webhook_id"], second["status"]) == ("delivered", run["id"], 200)
    assert second["verified"] and second["attempt"] == "2"
    assert chime.wait_for_run(run["id"], timeout_seconds=60)["status"] == "succeeded"
    assert [a["status_code"] for a in chime.runs.get(run["id"])["attempts"]] == [500, 200]

    # Chime delivering the run once more (the same bytes, the same headers): acknowledged, dropped.
    again = httpx.post(f"{working.url}/hook", content=second["raw_body"].encode(), headers=second["headers"])
    assert again.status_code == 200
    duplicate = working.next()
    assert (duplicate["outcome"], duplicate["webhook_id"]) == ("duplicate", run["id"])
    # A forged copy is refused.
    forged = {**second["headers"], "webhook-signature": "v1,AAAA"}
    assert httpx.post(f"{working.url}/hook", content=second["raw_body"].encode(), headers=forged).status_code == 401
    assert working.next()["outcome"] == "rejected"
