"""The README's PostgreSQL command, as a newcomer types it, on a server that does not have the
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
        chime.kill(signal.SIGTERM)
        try:
            chime.popen.wait(30)
        except subprocess.TimeoutExpired:
            chime.kill(signal.SIGKILL)
            chime.popen.wait(5)
        chime._log.close()
