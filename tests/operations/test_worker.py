"""A bulk replay of 5,000 dead letters on a real ops worker (Celery on Redis, PostgreSQL): it
reports progress, ends with every run replayed exactly once, and also when its worker is
SIGKILLed halfway (a new worker resumes it from its recorded progress)."""

import time

import pytest

from apps.jobs.models import JobRun, RunStatus
from apps.operations.models import Operation
from tests.factories import JobFactory
from tests.support.processes import start_worker, wait_until

from .support import ReplayLog, dead_letters

RUNS = 5000
# 25 chunks a few tens of ms apart: long enough to be killed in the middle, a few seconds in all.
OPS = {
    "CHIME_OPERATION_CHUNK_SIZE": "200",
    "CHIME_OPERATION_CHUNK_PAUSE_SECONDS": "0.1",
    "CHIME_OPERATION_LEASE_SECONDS": "2",
    "CHIME_OPERATION_SWEEP_SECONDS": "0.5",
}


@pytest.fixture
def ops_worker(transactional_db, redis_required):
    started = []

    def start():
        started.append(start_worker(name="ops", queues="ops", concurrency=1, **OPS))
        return started[-1]

    yield start
    for process in started:
        process.stop()


@pytest.fixture
def replay_log(transactional_db):
    with ReplayLog() as log:
        yield log


def progress(api, operation_id) -> dict:
    return api.get(f"/api/v1/operations/{operation_id}").json()


def start_replay(api, tenant) -> str:
    job = JobFactory(tenant=tenant)
    dead_letters(job, RUNS)
    response = api.post("/api/v1/operations/replay", {"job": str(job.id)}, format="json")
    assert response.status_code == 202, response.json()
    return response.json()["id"]


def assert_replayed_once(api, operation_id, replay_log):
    body = progress(api, operation_id)
    assert body["state"] == "succeeded", body
    assert body["result"] == {"replayed": RUNS}
    assert body["progress"] == {"done": RUNS, "total": RUNS}
    assert replay_log.counts() == (RUNS, RUNS)  # one failed -> scheduled change per run, no more
    assert JobRun.objects.filter(status=RunStatus.SCHEDULED, attempts_before_replay=1).count() == RUNS


def test_a_bulk_replay_reports_progress_and_replays_every_run_once(api, tenant, ops_worker, replay_log):
    ops_worker()
    operation_id = start_replay(api, tenant)
    seen = []

    def finished():
        body = progress(api, operation_id)
        seen.append(body["progress"]["done"])
        return body["state"] in ("succeeded", "failed")

    wait_until(finished, timeout=120, interval=0.05, message="operation finished")
    assert_replayed_once(api, operation_id, replay_log)
    partial = sorted({done for done in seen if 0 < done < RUNS})
    assert len(partial) >= 3, seen  # progress moved in steps the API showed
    assert seen == sorted(seen)  # and never went back


def test_a_bulk_replay_survives_its_worker_killed_halfway(api, tenant, ops_worker, replay_log):
    first = ops_worker()
    operation_id = start_replay(api, tenant)
    wait_until(lambda: progress(api, operation_id)["progress"]["done"] >= RUNS // 5, timeout=120, interval=0.02)
    first.kill()  # SIGKILL to the worker and its child: no ack, no cleanup
    first.popen.wait(10)
    at_kill = Operation.objects.get(pk=operation_id)
    assert 0 < at_kill.done < RUNS, "killed too late to test a resume"
    assert at_kill.finished_at is None and progress(api, operation_id)["state"] == "running"
    time.sleep(1)
    assert Operation.objects.get(pk=operation_id).done == at_kill.done  # nothing runs it meanwhile

    second = ops_worker()
    wait_until(lambda: progress(api, operation_id)["state"] in ("succeeded", "failed"), timeout=120, message="resumed")
    assert_replayed_once(api, operation_id, replay_log)
    assert "operations sent again" in second.log()  # by the sweep, not an hour later by Redis


def test_sigterm_hands_a_running_operation_back_and_the_next_worker_resumes_it(api, tenant, ops_worker, replay_log):
    """A deploy's SIGTERM (to every process of the worker, as a PaaS sends it): the operation stops
    between two chunks, gives its lease up and its message goes back to the queue, so the worker
    exits at once instead of running the whole operation out; the next worker resumes it."""
    import signal

    from apps.operations.models import REQUEUED

    first = ops_worker()
    operation_id = start_replay(api, tenant)
    wait_until(lambda: progress(api, operation_id)["progress"]["done"] >= RUNS // 5, timeout=120, interval=0.02)
    stopping = time.monotonic()
    first.kill(signal.SIGTERM)
    first.popen.wait(30)
    assert time.monotonic() - stopping < 10, "the worker ran the operation out instead of handing it back"
    handed = Operation.objects.get(pk=operation_id)
    assert handed.done < RUNS and handed.finished_at is None and handed.lease_owner == REQUEUED, handed.__dict__
    assert "handed back" in first.log()

    second = ops_worker()
    wait_until(lambda: progress(api, operation_id)["state"] in ("succeeded", "failed"), timeout=120)
    assert_replayed_once(api, operation_id, replay_log)
    assert "operations sent again" not in second.log()  # taken from the queue, not by the sweep
