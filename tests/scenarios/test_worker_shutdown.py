"""A worker stopped the way a PaaS stops it (SIGTERM, SIGKILL ~30 s later): requests in flight
finish or are handed back at once, never left to a lease expiry. Real worker and scheduler
processes, Redis, PostgreSQL, a receiver on 127.0.0.1 that holds the first request."""

import os
import signal
import time

import pytest

from apps.jobs.models import ErrorKind, JobRun, RunStatus
from tests.support.processes import start_scheduler, start_worker, wait_until
from tests.support.receiver import Reply

from .test_delivery import create_job, only_run

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.timeout(150)]

# A long run lease: recovery that waited for it would take 60 s; the test allows far less.
SLOW_LEASE = {
    "CHIME_RUN_LEASE_SECONDS": "60",
    "CHIME_RUN_LEASE_RENEW_SECONDS": "5",
    "CHIME_SWEEP_INTERVAL_SECONDS": "1",
}


@pytest.fixture
def processes(transactional_db, redis_required):
    started = {}
    yield started
    for process in started.values():
        process.stop()


@pytest.mark.parametrize("whom", ["process group", "main process only"])
def test_sigterm_hands_an_in_flight_run_back_at_once(processes, api, receiver, whom):
    first_seen = []

    def hold_the_first(delivery):
        first_seen.append(time.monotonic())
        return Reply(delay_seconds=60) if len(first_seen) == 1 else Reply(status=200)

    receiver.respond = hold_the_first
    processes["scheduler"] = start_scheduler(**SLOW_LEASE)
    processes["worker"] = worker = start_worker(CHIME_WORKER_SHUTDOWN_GRACE_SECONDS="3", **SLOW_LEASE)
    run = only_run(create_job(api, receiver, retry={"max_attempts": 3, "initial_backoff_seconds": 30}))
    wait_until(lambda: first_seen, timeout=30, message="the first request reached the endpoint")

    stopped_at = time.monotonic()
    if whom == "process group":
        worker.kill(signal.SIGTERM)  # what a PaaS does: every process of the dyno
    else:
        os.kill(worker.popen.pid, signal.SIGTERM)
    worker.popen.wait(30)
    assert time.monotonic() - stopped_at < 30, "shut down within a PaaS's kill timeout"
    assert worker.popen.returncode == 0

    run.refresh_from_db()
    # Handed back (then released again by the scheduler), not left `running` under a dead lease.
    assert run.status in (RunStatus.RETRYING, RunStatus.QUEUED) and run.lease_owner == "", run.status
    (attempt,) = run.attempts.all()
    assert attempt.error_kind == ErrorKind.WORKER_LOST and "shut down" in attempt.error

    processes["worker2"] = start_worker(name="worker2", **SLOW_LEASE)
    wait_until(
        lambda: JobRun.objects.filter(id=run.id, status=RunStatus.SUCCEEDED).exists(), timeout=40, message="success"
    )
    assert time.monotonic() - stopped_at < 50, "delivered again long before the 60 s lease would have expired"
    assert {d.webhook_id for d in receiver.received()} == {str(run.id)}
    log = worker.log()
    assert "Traceback" not in log and " ERROR" not in log, log[-3000:]


def test_sigusr2_writes_every_worker_process_thread_stacks_to_the_log_and_they_go_on():
    """What the chaos suite reads when a worker's shutdown overruns: `kill -USR2` on the group
    dumps the main process's and each pool child's threads, and none of them dies of it."""
    worker = start_worker(name="stacks")
    try:
        children = wait_until(lambda: _children(worker.popen.pid), timeout=30, message="the pool's children")
        worker.kill(signal.SIGUSR2)
        wait_until(
            lambda: worker.log().count("Current thread") >= 1 + len(children),
            timeout=10,
            message="a stack dump from every process",
        )
        assert "celery" in worker.log() and 'File "' in worker.log()
        time.sleep(0.5)
        assert worker.popen.poll() is None and _children(worker.popen.pid) == children, "all still running"
    finally:
        worker.stop()


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as fh:
        return sorted(int(child) for child in fh.read().split())
