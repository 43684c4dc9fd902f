"""`./chime run`, the README's commands: with no servers (embedded mode), and with PostgreSQL.

The README's PostgreSQL command, as a newcomer types it, on a server that does not have the
database yet: `DATABASE_URL=postgres://postgres@127.0.0.1:5432/<new> REDIS_URL=... ./chime run`
creates the database, migrates, and serves; the key it prints works against the API, and a bulk
operation runs to its end (honcho started the `ops` process too)."""

import json
import os
import re
import signal
import socket
import subprocess
import urllib.request
import uuid

import psycopg
import pytest
from django.conf import settings
from psycopg import sql

from tests.support.processes import Process, wait_until
from tests.support.receiver import Receiver

pytestmark = pytest.mark.slow

SERVER = {"host": "127.0.0.1", "port": 5432, "user": "postgres", "dbname": "postgres", "autocommit": True}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get(url: str, key: str = "") -> int:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=3) as response:  # noqa: S310
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return 0


def call(url: str, key: str, body: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers), timeout=5) as response:  # noqa: S310
        return json.loads(response.read())


def stop(chime: Process) -> None:
    """SIGTERM as a PaaS stops it, SIGKILL if honcho has not ended 30 s later."""
    chime.kill(signal.SIGTERM)
    try:
        chime.popen.wait(30)
    except subprocess.TimeoutExpired:
        chime.kill(signal.SIGKILL)
        chime.popen.wait(5)
    chime._log.close()


@pytest.fixture
def fresh_database():
    from tests.conftest import _require

    _require("PostgreSQL", "postgres://127.0.0.1:5432", 5432)
    _require("Redis", settings.REDIS_URL, 6379)
    name = f"chime_paper_run_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(**SERVER) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.mark.timeout(240)
def test_chime_run_on_a_server_without_its_database(fresh_database):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "CHIME_", "PYTEST"))}
    env.update(
        DATABASE_URL=f"postgres://postgres@127.0.0.1:5432/{fresh_database}",
        REDIS_URL=settings.REDIS_URL,
        PORT=str(port),
        WORKER_CONCURRENCY="1",
        PYTHONUNBUFFERED="1",
    )
    chime = Process("chime-run", ["./chime", "run"], env)
    try:
        chime.wait_for_log("Chime is starting.", timeout=180)
        key = re.search(r"API key:\s+(chime_\S+)", chime.log()).group(1)
        wait_until(lambda: get(f"http://127.0.0.1:{port}/healthz") == 200, timeout=60, message="web answers")
        assert get(f"http://127.0.0.1:{port}/api/v1/jobs", key) == 200
        operation = call(f"http://127.0.0.1:{port}/api/v1/operations/replay", key, {})
        url = f"http://127.0.0.1:{port}/api/v1/operations/{operation['id']}"
        wait_until(lambda: call(url, key)["state"] == "succeeded", timeout=60, message="the ops process ran it")
        assert "Traceback" not in chime.log()
    finally:
        stop(chime)


@pytest.mark.timeout(300)
def test_chime_run_with_no_servers_delivers_a_webhook(tmp_path):
    """The README's first command on a fresh machine: `./chime run` with no DATABASE_URL and no
    REDIS_URL (embedded mode: SQLite and a filesystem broker, under CHIME_VAR_DIR here instead of
    the checkout's var/). It migrates from nothing, serves, and its scheduler and worker deliver a
    job created through the API to a receiver on 127.0.0.1, signed. (Migrations built for
    PostgreSQL once broke this command: `add_index() got an unexpected keyword argument
    'concurrently'`.)"""
    receiver = Receiver().start()
    port = free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "CHIME_", "PYTEST")) and k not in ("DATABASE_URL", "REDIS_URL")
    }
    env.update(
        CHIME_VAR_DIR=str(tmp_path / "var"),
        PORT=str(port),
        WORKER_CONCURRENCY="1",
        WEBHOOK_ALLOW_PRIVATE_NETWORKS="true",  # the receiver is on 127.0.0.1
        PYTHONUNBUFFERED="1",
    )
    chime = Process("chime-run-embedded", ["./chime", "run"], env)
    try:
        chime.wait_for_log("Chime is starting.", timeout=180)
        key = re.search(r"API key:\s+(chime_\S+)", chime.log()).group(1)
        base = f"http://127.0.0.1:{port}"
        wait_until(lambda: get(f"{base}/healthz") == 200, timeout=60, message="web answers")
        target = {"url": f"{receiver.url}/hook", "body": {"n": 1}}
        job = call(f"{base}/api/v1/jobs", key, {"name": "embedded", "schedule": {"type": "once"}, "target": target})
        runs_url = f"{base}/api/v1/jobs/{job['id']}/runs"
        wait_until(
            lambda: [r["status"] for r in call(runs_url, key)["results"]] == ["succeeded"],
            timeout=90,
            message="the run delivered and recorded",
        )
        (delivery,) = receiver.received()
        assert delivery.json() == {"n": 1}
        assert delivery.webhook_id == call(runs_url, key)["results"][0]["id"]
        assert (tmp_path / "var" / "chime.sqlite3").exists()
        assert "Traceback" not in chime.log()
    finally:
        stop(chime)
        receiver.stop()
