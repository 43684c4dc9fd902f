"""A normal shutdown logs no ERROR: every Procfile process type, started as a PaaS starts it (`sh -c`
with the Procfile's line, $PORT set, no DJANGO_SETTINGS_MODULE), works for a moment on the real
PostgreSQL and Redis, gets SIGTERM, and must exit by itself within the 30 s a PaaS waits before
SIGKILL, after its own shutdown path, with no line with ERROR, CRITICAL or a Traceback in its output.

The web process also shows the rule of tests/test_request_logging.py on the real server: each 4xx
is one access-log line.
"""

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client

from apps.jobs.models import JobRun, RunStatus
from apps.jobs.services import job_create, job_trigger
from apps.tenants.models import Membership, Role
from apps.tenants.services import api_key_create, tenant_create
from tests.support.processes import ROOT, Process, database_url, wait_until
from tests.support.receiver import Receiver, Reply

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

PAAS_GRACE_SECONDS = 30
BAD_WORDS = ("ERROR", "CRITICAL", "Traceback")


def procfile() -> dict[str, str]:
    """{process type: command}, read the way Heroku and honcho read the Procfile."""
    lines = (line for line in (ROOT / "Procfile").read_text().splitlines() if line.strip() and line[0] != "#")
    return {name.strip(): command.strip() for name, _, command in (line.partition(":") for line in lines)}


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def deploy_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "CHIME_", "PYTEST"))}
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",  # `python`, `celery`, `uvicorn`
        DATABASE_URL=database_url(),
        REDIS_URL=settings.REDIS_URL,
        SECRET_KEY=settings.SECRET_KEY,  # the test's sessions must be valid in the web process
        WEBHOOK_ALLOW_PRIVATE_NETWORKS="true",  # the receiver is on 127.0.0.1
        PYTHONUNBUFFERED="1",
        WORKER_CONCURRENCY="2",
    )
    env.update(extra)
    return env


def start(kind: str, **extra: str) -> Process:
    return Process(f"procfile-{kind}", ["sh", "-c", procfile()[kind]], deploy_env(**extra))


def terminate(process: Process, *, group: bool = False) -> float:
    """SIGTERM as a PaaS sends it (to the main process, or to every process of the dyno); how long
    the process took to exit. It is SIGKILLed after the grace period, as a PaaS would."""
    started = time.monotonic()
    if group:
        os.killpg(process.popen.pid, signal.SIGTERM)
    else:
        process.popen.send_signal(signal.SIGTERM)
    try:
        process.popen.wait(PAAS_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill(signal.SIGKILL)
        process.popen.wait(5)
    finally:
        process._log.close()
    return time.monotonic() - started


def assert_clean_exit(process: Process, took: float, *, said: str) -> None:
    """Exited in time, by itself, after its own shutdown path (`said` is the line it logs at the
    end of it). Exit status 0, or the SIGTERM itself: uvicorn re-raises the signal once it has
    shut down, so that whoever sent it sees it (143 in a shell)."""
    log = process.log()
    bad = [line for line in log.splitlines() if any(word in line for word in BAD_WORDS)]
    assert took < PAAS_GRACE_SECONDS, f"{process.name} needed SIGKILL after {PAAS_GRACE_SECONDS} s:\n{log[-3000:]}"
    assert not bad, f"{process.name} logged:\n" + "\n".join(bad) + f"\n--- full log ---\n{log[-5000:]}"
    assert process.popen.returncode in (0, -signal.SIGTERM), f"{process.name} exited with {process.popen.returncode}"
    assert said in log, f"{process.name} did not go through its shutdown ({said!r}):\n{log[-3000:]}"


@pytest.fixture
def broker():
    import redis

    from tests.conftest import _require

    _require("Redis", settings.REDIS_URL, 6379)
    redis.Redis.from_url(settings.REDIS_URL).flushdb()


@pytest.fixture
def receiver():
    server = Receiver().start()
    yield server
    server.stop()


@pytest.fixture
def stoppers():
    """Processes a test started, stopped at its end whatever happened (before the database flush)."""
    started: list[Process] = []
    yield started
    for process in started:
        if process.popen.poll() is None:
            process.kill(signal.SIGKILL)
            process.popen.wait(5)
        if not process._log.closed:
            process._log.close()


def request(url: str, *, method: str = "GET", key: str = "", body: bytes | None = None) -> int:
    headers = {"X-Forwarded-Proto": "https", "Content-Type": "application/json"}  # behind a TLS proxy
    if key:
        headers["Authorization"] = f"Bearer {key}"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, body, headers, method=method), timeout=5) as answer:  # noqa: S310
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return 0


def test_web(broker, stoppers):
    from websockets.sync.client import connect

    tenant = tenant_create(slug="acme", name="Acme")
    key = api_key_create(tenant=tenant).raw_key
    user = get_user_model().objects.create_user(username="owner@acme.test", password="pw-Chime-2026!")
    Membership.objects.create(user=user, tenant=tenant, role=Role.OWNER)
    client = Client()
    client.force_login(user)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    web = start("web", PORT=str(port))
    stoppers.append(web)
    wait_until(lambda: request(f"{base}/healthz") == 200, timeout=120, message="web answers")

    assert request(f"{base}/api/v1/jobs", key=key) == 200
    assert request(f"{base}/api/v1/jobs", key=key, method="POST", body=b'{"name": ""}') == 400
    assert request(f"{base}/api/v1/nothing-here", key=key) == 404
    # A live dashboard stays connected through the shutdown, as a browser tab would.
    with connect(
        f"ws://127.0.0.1:{port}/ws/live/?view=runs&since=0",
        additional_headers={"Cookie": f"sessionid={client.cookies['sessionid'].value}", "Origin": base},
        open_timeout=10,
    ):
        wait_until(lambda: "/ws/live/" in web.log(), timeout=10, message="the WebSocket is accepted")
        took = terminate(web)

    assert_clean_exit(web, took, said="Finished server process")
    log = web.log()
    assert log.count('"POST /api/v1/jobs HTTP/1.1" 400') == 1
    assert "Bad Request: /api/v1/jobs" not in log  # Django does not log the 4xx a second time


def test_scheduler(broker, stoppers):
    tenant = tenant_create(slug="acme", name="Acme")
    job = job_create(tenant=tenant, name="tick", schedule_type="cron", cron_expression="* * * * *",
                     timezone="UTC", target_url="http://127.0.0.1:9/hook")  # fmt: skip
    scheduler = start("scheduler")
    stoppers.append(scheduler)
    scheduler.wait_for_log("scheduler started", timeout=60)
    run = job_trigger(job=job)
    wait_until(
        lambda: JobRun.objects.filter(pk=run.pk).exclude(status=RunStatus.SCHEDULED).exists(),
        timeout=30,
        message="the scheduler released the triggered run",
    )
    time.sleep(1)  # a few more idle ticks and a lease refresh

    assert_clean_exit(scheduler, terminate(scheduler), said="scheduler stopped")


@pytest.mark.parametrize("group", [False, True], ids=["sigterm-main-process", "sigterm-process-group"])
def test_worker(broker, receiver, stoppers, group):
    receiver.respond = lambda delivery: Reply(status=200, delay_seconds=3)  # in flight at the SIGTERM
    tenant = tenant_create(slug="acme", name="Acme")
    job = job_create(tenant=tenant, name="slow", schedule_type="cron", cron_expression="0 0 1 1 *",
                     timezone="UTC", target_url=f"{receiver.url}/slow")  # fmt: skip
    scheduler = start("scheduler")
    worker = start("worker")
    stoppers.extend([worker, scheduler])
    worker.wait_for_log("ready.", timeout=90)
    scheduler.wait_for_log("scheduler started", timeout=60)
    first = job_trigger(job=job)
    wait_until(lambda: JobRun.objects.filter(pk=first.pk, status=RunStatus.SUCCEEDED).exists(), timeout=60,
               message="a first run delivered")  # fmt: skip
    job_trigger(job=job)
    wait_until(lambda: len(receiver.deliveries) >= 2, timeout=30, message="a second delivery in flight")

    assert_clean_exit(worker, terminate(worker, group=group), said="Warm shutdown")
