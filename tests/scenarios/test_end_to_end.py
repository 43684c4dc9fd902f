"""The real path: API -> PostgreSQL -> scheduler process -> Redis -> Celery worker process -> HTTP
receiver on 127.0.0.1 that verifies Standard Webhooks signatures."""

from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from apps.jobs.models import JobDefinition, JobRun, JobStatus, RunStatus
from tests.support.processes import start_scheduler, start_worker, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def create_job(api, receiver, name: str, schedule: dict) -> dict:
    response = api.post(
        "/api/v1/jobs",
        {"name": name, "schedule": schedule, "target": {"url": f"{receiver.url}/{name}", "body": {"job": name}}},
        format="json",
    )
    assert response.status_code == 201, response.json()
    return response.json()


@pytest.mark.timeout(180)
def test_a_once_job_and_an_every_minute_job_arrive_signed(api, receiver, redis_required):
    once = create_job(api, receiver, "once", {"type": "once"})
    cron = create_job(api, receiver, "cron", {"type": "cron", "expression": "* * * * *", "timezone": "Europe/Berlin"})
    first_cron_fire = datetime.fromisoformat(cron["next_fire_at"])

    worker = start_worker()
    scheduler = start_scheduler("--shard", "0", "--shards", "1")
    try:
        wait_until(lambda: len(receiver.received(lambda d: d.path == "/once")) >= 1, timeout=30, message="once job")
        # The cron job fires at the next minute boundary: up to 60 s away.
        wait_until(lambda: len(receiver.received(lambda d: d.path == "/cron")) >= 1, timeout=90, message="cron job")
        wait_until(
            lambda: JobRun.objects.filter(status=RunStatus.SUCCEEDED).count() >= 2, timeout=15, message="runs recorded"
        )
    finally:
        scheduler.stop()
        worker.stop()

    deliveries = receiver.received()
    assert all(d.signature_ok for d in deliveries), "every delivery verifies with the tenant's secret"
    once_delivery = receiver.received(lambda d: d.path == "/once")[0]
    assert once_delivery.json() == {"job": "once"}
    once_run = JobRun.objects.get(definition_id=once["id"])
    assert once_delivery.webhook_id == str(once_run.id)
    assert once_delivery.headers["idempotency-key"] == str(once_run.id)
    assert once_run.status == RunStatus.SUCCEEDED
    assert once_run.attempt_count == 1
    assert once_run.attempts.count() == 1
    assert once_run.attempts.get().status_code == 200

    cron_run = JobRun.objects.filter(definition_id=cron["id"]).order_by("scheduled_for").first()
    assert cron_run.scheduled_for == first_cron_fire
    assert cron_run.status == RunStatus.SUCCEEDED
    assert cron_run.attempts.count() == 1
    assert receiver.received(lambda d: d.path == "/cron")[0].webhook_id == str(cron_run.id)

    # The API tells the same story.
    once_job = api.get(f"/api/v1/jobs/{once['id']}").json()
    assert once_job["status"] == "completed"
    assert once_job["next_fire_at"] is None
    assert once_job["recent_runs"][0]["status"] == "succeeded"
    run = api.get(f"/api/v1/runs/{once_run.id}").json()
    assert [a["status_code"] for a in run["attempts"]] == [200]
    cron_job = JobDefinition.objects.get(pk=cron["id"])
    assert cron_job.status == JobStatus.ACTIVE
    assert cron_job.next_fire_at > first_cron_fire


@pytest.mark.timeout(240)
def test_two_schedulers_on_one_shard_create_no_duplicate_runs_or_deliveries(api, receiver, redis_required):
    """Two schedulers on the same shard for a minute: every occurrence exactly one run, one delivery."""
    now = datetime.now(UTC)
    once_ids = []
    for i in range(120):
        run_at = (now + timedelta(seconds=5 + i * 0.5)).isoformat()
        once_ids.append(create_job(api, receiver, f"once-{i}", {"type": "once", "run_at": run_at})["id"])
    cron_ids = [
        create_job(api, receiver, f"cron-{i}", {"type": "cron", "expression": "* * * * *"})["id"] for i in range(20)
    ]

    worker = start_worker(concurrency=2)
    schedulers = [start_scheduler("--shard", "0", "--shards", "1", name=f"scheduler-{n}") for n in (1, 2)]
    try:
        # Long enough for every once job and at least one minute boundary for the cron jobs.
        wait_until(
            lambda: JobRun.objects.filter(definition_id__in=once_ids, status=RunStatus.SUCCEEDED).count() == 120,
            timeout=90,
            message="all once jobs delivered",
        )
        wait_until(
            lambda: JobRun.objects.filter(definition_id__in=cron_ids, status=RunStatus.SUCCEEDED).count() >= 20,
            timeout=90,
            message="a minute of cron runs delivered",
        )
        boundary = datetime.now(UTC)
        wait_until(lambda: datetime.now(UTC) >= boundary + timedelta(seconds=3), timeout=5)
    finally:
        for scheduler in schedulers:
            scheduler.stop()
        worker.stop()
    # Both ran the whole time; pinned to one slice, one holds the leases and the other stands by.
    assert all(s.popen.returncode in (0, -15) for s in schedulers), [s.log()[-2000:] for s in schedulers]

    for job_id in once_ids:
        assert JobRun.objects.filter(definition_id=job_id).count() == 1
    cron_runs = JobRun.objects.filter(definition_id__in=cron_ids)
    per_occurrence = Counter((r.definition_id, r.scheduled_for) for r in cron_runs)
    assert max(per_occurrence.values()) == 1
    assert all(r.scheduled_for.second == 0 for r in cron_runs)

    delivered = Counter(d.webhook_id for d in receiver.received())
    duplicates = {webhook_id: n for webhook_id, n in delivered.items() if n > 1}
    assert duplicates == {}
    succeeded = JobRun.objects.filter(status=RunStatus.SUCCEEDED)
    assert set(delivered) >= {str(r.id) for r in succeeded}
    assert all(r.attempt_count == 1 for r in succeeded)
