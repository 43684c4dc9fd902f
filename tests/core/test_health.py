"""Health checks as an orchestrator uses them (issue #13, deliverable 2): /healthz and /readyz of a
real web process (uvicorn, production settings) on private PostgreSQL and Redis servers that the
test stops and starts, and `manage.py probe scheduler|worker` beside the real processes."""

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from bench.chaos.servers import PostgresServer, RedisServer, make_workspace, missing_binaries, remove_workspace
from tests.support.processes import ROOT, process_env, start_scheduler, start_worker, wait_until
from tests.support.web import start_web

UNREADY_WITHIN_SECONDS = 5  # the acceptance bound of issue #13


def status_of(url: str) -> tuple[int, dict]:
    import json

    try:
        with urllib.request.urlopen(url, timeout=10) as answer:  # noqa: S310 (our own URL)
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def time_until(condition, *, timeout: float) -> float:
    started = time.monotonic()
    wait_until(condition, timeout=timeout, interval=0.1, message="readiness changed")
    return time.monotonic() - started


@pytest.fixture
def private_servers():
    missing = missing_binaries()
    assert not missing, f"missing server binaries: {missing}"
    workspace = make_workspace()
    postgres = PostgresServer(workspace / "pgdata").initdb().start()
    redis_server = RedisServer(workspace / "redis").start()
    try:
        yield postgres, redis_server
    finally:
        redis_server.stop()
        postgres.stop("immediate")
        remove_workspace(workspace)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_readyz_turns_unready_within_seconds_of_a_dependency_going_away_and_ready_after(private_servers):
    postgres, redis_server = private_servers
    web = start_web(DATABASE_URL=postgres.url("postgres"), REDIS_URL=redis_server.url).wait_ready()
    readyz = f"{web.url}/readyz"
    try:
        assert status_of(readyz) == (200, {"status": "ready", "checks": {"database": "ok", "redis": "ok"}})

        redis_server.kill()
        took = time_until(lambda: status_of(readyz)[0] == 503, timeout=30)
        code, body = status_of(readyz)
        assert code == 503 and body["checks"] == {"database": "ok", "redis": "unavailable"}
        assert took < UNREADY_WITHIN_SECONDS, f"unready {took:.1f} s after Redis went away"
        assert status_of(f"{web.url}/healthz")[0] == 200, "liveness does no I/O: still alive"

        redis_server.start()
        time_until(lambda: status_of(readyz)[0] == 200, timeout=30)

        postgres.stop("immediate")
        took = time_until(lambda: status_of(readyz)[0] == 503, timeout=30)
        code, body = status_of(readyz)
        assert code == 503 and body["checks"] == {"database": "unavailable", "redis": "ok"}
        assert took < UNREADY_WITHIN_SECONDS, f"unready {took:.1f} s after PostgreSQL went away"
        assert "127.0.0.1" not in str(body) and str(postgres.port) not in str(body), "no server address leaks"

        postgres.start()
        time_until(lambda: status_of(readyz)[0] == 200, timeout=30)
    finally:
        web.stop()


def probe(process_type: str, heartbeat_dir, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", "probe", process_type, *extra],
        cwd=ROOT,
        env=process_env(CHIME_HEARTBEAT_DIR=str(heartbeat_dir)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.django_db(transaction=True)
def test_scheduler_probe_follows_its_heartbeat(tmp_path):
    assert probe("scheduler", tmp_path).returncode == 1, "no scheduler has beaten here yet"
    scheduler = start_scheduler(CHIME_HEARTBEAT_DIR=str(tmp_path))
    try:
        wait_until(lambda: probe("scheduler", tmp_path).returncode == 0, timeout=30, message="scheduler ready")
        answer = probe("scheduler", tmp_path)
        assert '"heartbeat": "ok"' in answer.stdout

        scheduler.kill(signal.SIGSTOP)  # frozen: alive, not working
        time.sleep(2.5)
        frozen = probe("scheduler", tmp_path, "--max-age-seconds", "2")
        assert frozen.returncode == 1 and '"heartbeat": "unavailable"' in frozen.stderr
        scheduler.kill(signal.SIGCONT)
        wait_until(
            lambda: probe("scheduler", tmp_path, "--max-age-seconds", "2").returncode == 0,
            timeout=30,
            message="scheduler ready again after SIGCONT",
        )
    finally:
        scheduler.kill(signal.SIGCONT)
        scheduler.stop()
    assert probe("scheduler", tmp_path).returncode == 1, "a stopped scheduler is not ready"


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.django_db(transaction=True)
def test_worker_probe_follows_its_heartbeat(tmp_path):
    worker = start_worker(CHIME_HEARTBEAT_DIR=str(tmp_path), CHIME_HEARTBEAT_SECONDS="0.5")
    try:
        wait_until(lambda: probe("worker", tmp_path).returncode == 0, timeout=30, message="worker ready")
        os.kill(worker.popen.pid, signal.SIGSTOP)  # the main process: it is the one that consumes
        time.sleep(2.5)
        frozen = probe("worker", tmp_path, "--max-age-seconds", "2")
        assert frozen.returncode == 1 and '"heartbeat": "unavailable"' in frozen.stderr
        os.kill(worker.popen.pid, signal.SIGCONT)
        wait_until(
            lambda: probe("worker", tmp_path, "--max-age-seconds", "2").returncode == 0,
            timeout=30,
            message="worker ready again after SIGCONT",
        )
    finally:
        os.kill(worker.popen.pid, signal.SIGCONT)
        worker.stop()
    assert probe("worker", tmp_path).returncode == 1, "a stopped worker is not ready"


def test_probe_refuses_a_bad_max_age(tmp_path):
    answer = probe("worker", tmp_path, "--max-age-seconds", "0")
    assert answer.returncode != 0 and "--max-age-seconds must be positive" in answer.stderr
