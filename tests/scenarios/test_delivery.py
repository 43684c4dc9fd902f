"""Delivery on real parts: scheduler and Celery worker processes, Redis, PostgreSQL, and an HTTP
receiver on 127.0.0.1 that answers as each test tells it to."""

import signal
import time
from datetime import UTC, datetime, timedelta

import pytest

from apps.jobs.models import JobDefinition, JobRun, RunStatus
from tests.support.processes import start_worker, wait_until
from tests.support.receiver import Reply

from .conftest import FAST

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.timeout(120)]


def create_job(api, receiver, name="job", *, schedule=None, **fields) -> dict:
    body = {
        "name": name,
        "schedule": schedule or {"type": "once"},
        "target": {"url": f"{receiver.url}/{name}", "body": {"job": name}},
        "retry": {"max_attempts": 3, "initial_backoff_seconds": 1, "max_backoff_seconds": 2},
        **fields,
    }
    response = api.post("/api/v1/jobs", body, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def only_run(job: dict) -> JobRun:
    return wait_until(lambda: JobRun.objects.filter(definition_id=job["id"]).first(), timeout=15, message="run")


def wait_for_status(run_id, *statuses, timeout=30) -> JobRun:
    return wait_until(
        lambda: JobRun.objects.filter(id=run_id, status__in=statuses).first(), timeout=timeout, message=f"{statuses}"
    )


def replies(*sequence: Reply):
    """Answer with each reply in turn, then keep answering with the last one."""
    answers = list(sequence)

    def respond(delivery):
        return answers.pop(0) if len(answers) > 1 else answers[0]

    return respond


def test_a_failed_attempt_is_retried_then_succeeds(chime, api, receiver):
    receiver.respond = replies(Reply(status=503), Reply(status=200))
    run = only_run(create_job(api, receiver))
    run = wait_for_status(run.id, RunStatus.SUCCEEDED)
    attempts = list(run.attempts.order_by("number"))
    assert [(a.number, a.status_code) for a in attempts] == [(1, 503), (2, 200)]
    assert attempts[0].error == "HTTP 503"
    ids = {d.webhook_id for d in receiver.received()}
    assert ids == {str(run.id)}, "every attempt carries the same webhook-id"
    assert [d.headers["chime-attempt"] for d in receiver.received()] == ["1", "2"]


def test_exhausted_retries_dead_letter_the_run_and_replay_delivers_it(chime, api, receiver):
    receiver.respond = replies(Reply(status=500))
    run = only_run(create_job(api, receiver))
    run = wait_for_status(run.id, RunStatus.FAILED)
    assert run.attempts.count() == 3
    assert "no attempts left" in run.status_reason
    assert [r["id"] for r in api.get("/api/v1/runs?status=failed").json()["results"]] == [str(run.id)]

    receiver.respond = replies(Reply(status=200))
    response = api.post(f"/api/v1/runs/{run.id}/replay")
    assert response.status_code == 202
    run = wait_for_status(run.id, RunStatus.SUCCEEDED)
    assert [a.number for a in run.attempts.order_by("number")] == [1, 2, 3, 4]
    assert {d.webhook_id for d in receiver.received()} == {str(run.id)}
    assert len(receiver.received()) == 4


def test_a_4xx_is_not_retried(chime, api, receiver):
    receiver.respond = replies(Reply(status=422))
    run = wait_for_status(only_run(create_job(api, receiver)).id, RunStatus.FAILED)
    assert run.attempts.count() == 1
    assert "not retryable" in run.status_reason
    time.sleep(2)
    assert len(receiver.received()) == 1


def test_retry_after_is_honoured(chime, api, receiver):
    receiver.respond = replies(Reply(status=429, headers={"Retry-After": "3"}), Reply(status=200))
    run = wait_for_status(only_run(create_job(api, receiver)).id, RunStatus.SUCCEEDED, timeout=30)
    first, second = receiver.received()
    # Backoff alone would be at most 1 s here (initial_backoff_seconds=1, full jitter).
    assert second.received_at - first.received_at >= 3
    assert run.attempts.count() == 2


def test_a_slow_endpoint_times_out_and_is_retried(chime, api, receiver):
    receiver.respond = replies(Reply(delay_seconds=3), Reply(status=200))
    run = wait_for_status(only_run(create_job(api, receiver, timeout_seconds=1)).id, RunStatus.SUCCEEDED)
    first = run.attempts.get(number=1)
    assert (first.error_kind, first.status_code) == ("timeout", None)
    assert 900 <= first.duration_ms < 2900


def test_a_delivery_longer_than_the_lease_keeps_its_lease(chime, api, receiver):
    """The worker renews the lease (3 s here) while a 6 s request is in flight: no worker_lost."""
    receiver.respond = replies(Reply(delay_seconds=6))
    run = wait_for_status(only_run(create_job(api, receiver, timeout_seconds=20)).id, RunStatus.SUCCEEDED)
    assert [(a.number, a.status_code, a.error_kind) for a in run.attempts.all()] == [(1, 200, "")]
    assert len(receiver.received()) == 1


def test_a_run_cancelled_before_its_time_is_never_sent(chime, api, receiver):
    run_at = datetime.now(UTC) + timedelta(seconds=6)
    job = create_job(api, receiver, schedule={"type": "once", "run_at": run_at.isoformat()})
    run = only_run(job)  # materialized a couple of seconds ahead
    assert api.post(f"/api/v1/runs/{run.id}/cancel").status_code == 200
    while datetime.now(UTC) < run_at + timedelta(seconds=3):
        time.sleep(0.2)
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    assert receiver.received() == []


def slow_job(api, receiver, policy: str) -> dict:
    receiver.respond = replies(Reply(delay_seconds=3))
    job = create_job(api, receiver, concurrency_policy=policy, schedule={"type": "cron", "expression": "0 0 1 1 *"})
    return job


def trigger_twice(api, job) -> tuple[str, str]:
    first = api.post(f"/api/v1/jobs/{job['id']}/trigger").json()["id"]
    wait_for_status(first, RunStatus.RUNNING, timeout=10)
    second = api.post(f"/api/v1/jobs/{job['id']}/trigger").json()["id"]
    return first, second


def test_concurrency_forbid_skips_a_run_while_one_is_running(chime, api, receiver):
    first, second = trigger_twice(api, slow_job(api, receiver, "forbid"))
    skipped = wait_for_status(second, RunStatus.SKIPPED)
    assert f"run {first}" in skipped.status_reason and "forbid" in skipped.status_reason
    wait_for_status(first, RunStatus.SUCCEEDED)
    assert [d.webhook_id for d in receiver.received()] == [first]


def test_concurrency_replace_cancels_the_running_run(chime, api, receiver):
    first, second = trigger_twice(api, slow_job(api, receiver, "replace"))
    wait_for_status(second, RunStatus.SUCCEEDED, timeout=20)
    replaced = JobRun.objects.get(id=first)
    time.sleep(3.5)  # the first request finishes meanwhile; its outcome must not overwrite the cancel
    replaced.refresh_from_db()
    assert replaced.status == RunStatus.CANCELLED
    assert f"Replaced by run {second}" in replaced.status_reason
    assert sorted(d.webhook_id for d in receiver.received()) == sorted([first, second])


def test_concurrency_allow_lets_runs_overlap(chime, api, receiver):
    first, second = trigger_twice(api, slow_job(api, receiver, "allow"))
    wait_for_status(first, RunStatus.SUCCEEDED, timeout=20)
    wait_for_status(second, RunStatus.SUCCEEDED, timeout=20)
    a, b = (JobRun.objects.get(id=i) for i in (first, second))
    assert b.started_at < a.finished_at, "the second ran while the first was still in flight"


SSRF_TARGETS = [
    "http://127.0.0.1:{port}/x",
    "http://10.0.0.1/x",
    "http://169.254.169.254/latest/meta-data/",
    "http://[::1]:{port}/x",
    "http://localhost:{port}/x",
]


def test_private_targets_are_refused_at_delivery(chime, api, receiver):
    """A worker with WEBHOOK_ALLOW_PRIVATE_NETWORKS off refuses them all, as non-retryable attempts."""
    port = receiver.server.server_address[1]
    guarded = start_worker(name="worker-guarded", queues="runs.low", WEBHOOK_ALLOW_PRIVATE_NETWORKS="false", **FAST)
    try:
        run_ids = []
        for i, url in enumerate(SSRF_TARGETS):
            # The API (test settings allow private targets) creates it paused; then it is pointed
            # inward and resumed, so only the guarded worker's check stands in the way.
            job = create_job(api, receiver, f"ssrf-{i}", priority="low", enabled=False)
            JobDefinition.objects.filter(id=job["id"]).update(target_url=url.format(port=port))
            api.post(f"/api/v1/jobs/{job['id']}/resume")
            run_ids.append((url, only_run(job).id))
        for url, run_id in run_ids:
            run = wait_for_status(run_id, RunStatus.FAILED)
            attempt = run.attempts.get()
            assert attempt.error_kind == "refused", (url, attempt.error)
            assert "refused" in attempt.error and "WEBHOOK_ALLOW_PRIVATE_NETWORKS" in attempt.error
    finally:
        guarded.stop()
    assert receiver.received() == []


def test_a_worker_killed_mid_delivery_is_replaced_and_the_run_delivered_again(chime, api, receiver):
    chime["worker"].stop()  # this test brings its own workers
    try:
        receiver.respond = replies(Reply(delay_seconds=4), Reply(status=200))
        victim = start_worker(name="worker-victim", queues="runs.high,runs.default", concurrency=1, **FAST)
        run = only_run(create_job(api, receiver, "slow"))
        wait_until(lambda: len(receiver.received()) == 1, timeout=20, message="first delivery in flight")
        victim.kill(signal.SIGKILL)
        victim.stop()
        rescuer = start_worker(name="worker-rescuer", queues="runs.high,runs.default", **FAST)
        try:
            run = wait_for_status(run.id, RunStatus.SUCCEEDED, timeout=40)
        finally:
            rescuer.stop()
    finally:
        chime["worker"] = start_worker(queues="runs.high,runs.default", **FAST)
    deliveries = receiver.received()
    assert len(deliveries) == 2
    assert {d.webhook_id for d in deliveries} == {str(run.id)}
    attempts = list(run.attempts.order_by("number"))
    assert [a.error_kind for a in attempts] == ["worker_lost", ""]
    assert attempts[0].worker != attempts[1].worker
