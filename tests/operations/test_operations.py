"""Bulk operations without a worker: the kinds' chunks run in-process (operation_run), the API's
validation, idempotency, tenant scoping, and the state read from django-celery-results."""

import json
from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone
from django_celery_results.models import TaskResult

from apps.delivery.tasks import deliver_runs_task
from apps.jobs.models import JobRun, RunStatus, Trigger
from apps.operations import services
from apps.operations.models import REQUEUED, Operation
from apps.operations.tasks import run_operation_task
from config.celery import app
from tests.factories import JobFactory

from .support import ReplayLog, dead_letters

pytestmark = pytest.mark.django_db


@pytest.fixture
def job(tenant):
    return JobFactory(tenant=tenant)


def start_replay(tenant, **params):
    return services.operation_start(tenant=tenant, kind="replay", params=params)


@override_settings(CHIME_OPERATION_CHUNK_SIZE=7)
def test_a_replay_moves_every_matching_dead_letter_once_in_chunks(tenant, job):
    other_job = JobFactory(tenant=tenant)
    wanted = dead_letters(job, 30, status_code=503)
    dead_letters(job, 5, status_code=404)
    dead_letters(job, 4, status_code=None, error_kind="timeout")
    dead_letters(other_job, 6, status_code=503)
    operation = start_replay(tenant, job=str(job.id), status_code=503)
    with ReplayLog() as log:
        result = services.operation_run(operation.pk, owner="test", pause=0)
        assert log.counts() == (30, 30)
    assert result == {"replayed": 30}
    operation.refresh_from_db()
    assert (operation.done, operation.total, operation.finished_at is not None) == (30, 30, True)
    assert set(JobRun.objects.filter(status=RunStatus.SCHEDULED).values_list("id", flat=True)) == set(wanted)
    replayed = JobRun.objects.filter(id__in=wanted)
    assert {run.attempts_before_replay for run in replayed} == {1}


def test_a_replay_filters_by_error_kind_and_scheduled_range(tenant, job):
    start = timezone.now() - timedelta(days=10)
    timeouts = dead_letters(job, 10, status_code=None, error_kind="timeout", start=start)
    dead_letters(job, 3, status_code=500, error_kind="http", start=start + timedelta(minutes=3, seconds=30))
    operation = start_replay(
        tenant,
        error_kind="timeout",
        scheduled_after=(start + timedelta(minutes=2)).isoformat(),
        scheduled_before=(start + timedelta(minutes=5)).isoformat(),
    )
    assert services.operation_run(operation.pk, owner="test", pause=0) == {"replayed": 3}
    assert (
        list(JobRun.objects.filter(status=RunStatus.SCHEDULED).order_by("id").values_list("id", flat=True))
        == (timeouts[2:5])
    )


@override_settings(CHIME_OPERATION_CHUNK_SIZE=4)
def test_a_resumed_replay_starts_after_its_last_committed_chunk(tenant, job):
    """What a re-delivered task sees after its worker died: progress and cursor as the last chunk
    committed them. A run that failed again after its replay (before the cursor) is not replayed twice."""
    ids = dead_letters(job, 10)
    operation = start_replay(tenant)
    Operation.objects.filter(pk=operation.pk).update(
        total=10, done=4, cursor=str(ids[3]), counts={"replayed": 4}, lease_owner="dead-worker",
        lease_expires_at=timezone.now() - timedelta(seconds=1),
    )  # fmt: skip
    assert services.operation_run(operation.pk, owner="next-worker", pause=0) == {"replayed": 10}
    assert JobRun.objects.filter(id__in=ids[:4], status=RunStatus.FAILED).count() == 4  # not redone
    assert JobRun.objects.filter(id__in=ids[4:], status=RunStatus.SCHEDULED).count() == 6


def test_a_held_operation_is_left_to_its_worker_and_a_finished_one_answers_its_result(tenant, job):
    dead_letters(job, 3)
    operation = start_replay(tenant)
    Operation.objects.filter(pk=operation.pk).update(
        lease_owner="alive", lease_expires_at=timezone.now() + timedelta(minutes=1)
    )
    with pytest.raises(services.OperationBusy):
        services.operation_run(operation.pk, owner="duplicate", pause=0)
    assert JobRun.objects.filter(status=RunStatus.FAILED).count() == 3
    Operation.objects.filter(pk=operation.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert services.operation_run(operation.pk, owner="next", pause=0) == {"replayed": 3}
    assert services.operation_run(operation.pk, owner="late-duplicate", pause=0) == {"replayed": 3}


def test_the_sweep_sends_again_operations_whose_lease_lapsed(tenant, django_capture_on_commit_callbacks):
    lapsed = start_replay(tenant)
    alive = start_replay(tenant)
    Operation.objects.filter(pk=lapsed.pk).update(lease_owner="dead", lease_expires_at=timezone.now() - timedelta(1))
    Operation.objects.filter(pk=alive.pk).update(lease_owner="alive", lease_expires_at=timezone.now() + timedelta(1))
    with django_capture_on_commit_callbacks() as sent:
        assert services.requeue_lapsed() == 1
    assert len(sent) == 1
    lapsed.refresh_from_db()
    assert (lapsed.lease_owner, lapsed.lease_expires_at) == (REQUEUED, None)
    assert services.requeue_lapsed() == 0  # sent once, not at every sweep


@override_settings(CHIME_OPERATION_CHUNK_SIZE=25)
def test_a_backfill_materializes_a_long_range_in_chunks_keeping_existing_runs(tenant):
    job = JobFactory(tenant=tenant, cron_expression="* * * * *")
    end = timezone.now().replace(second=0, microsecond=0) - timedelta(hours=1)
    start = end - timedelta(minutes=90)  # the default max_backfill_runs is 100
    JobRun.objects.create(
        tenant=tenant, definition=job, partition=job.partition, scheduled_for=start + timedelta(minutes=10),
        available_at=start, trigger=Trigger.SCHEDULE,
    )  # fmt: skip
    operation = services.operation_start(
        tenant=tenant, kind="backfill", params={"job": str(job.id), "start": start.isoformat(), "end": end.isoformat()}
    )
    assert services.operation_run(operation.pk, owner="test", pause=0) == {"created": 89, "existing": 1}
    assert JobRun.objects.filter(definition=job, trigger=Trigger.BACKFILL).count() == 89
    operation.refresh_from_db()
    assert (operation.done, operation.total) == (90, 90)


def test_a_backfill_of_a_paused_job_fails_with_its_reason(tenant):
    job = JobFactory(tenant=tenant, cron_expression="* * * * *", status="paused")
    end = timezone.now() - timedelta(hours=1)
    operation = services.operation_start(
        tenant=tenant,
        kind="backfill",
        params={"job": str(job.id), "start": (end - timedelta(hours=1)).isoformat(), "end": end.isoformat()},
    )
    with pytest.raises(services.OperationFailed, match="paused"):
        services.operation_run(operation.pk, owner="test", pause=0)
    operation.refresh_from_db()
    assert operation.finished_at is not None and operation.lease_owner == ""


def test_only_the_operation_task_stores_a_result_and_it_runs_on_its_own_queue():
    """CELERY_TASK_IGNORE_RESULT stays on for delivery (a result row per run would cost a write per run)."""
    assert app.conf.task_ignore_result is True
    assert deliver_runs_task.ignore_result is True
    assert run_operation_task.ignore_result is False
    assert (run_operation_task.acks_late, run_operation_task.reject_on_worker_lost) == (True, True)
    assert app.amqp.router.route({}, run_operation_task.name)["queue"].name == "ops"
    assert app.amqp.router.route({}, deliver_runs_task.name)["queue"].name != "ops"


# --- API --------------------------------------------------------------------------------------


def test_post_replay_answers_202_with_a_pending_operation_and_get_follows_it(api, tenant, job):
    dead_letters(job, 3)
    response = api.post("/api/v1/operations/replay", {"job": str(job.id)}, format="json")
    assert response.status_code == 202, response.json()
    body = response.json()
    assert body["kind"] == "replay" and body["state"] == "pending"
    assert body["params"] == {"job": str(job.id)} and body["progress"] == {"done": 0, "total": None}
    operation = Operation.objects.get(pk=body["id"])
    services.operation_run(operation.pk, owner="test", pause=0)
    TaskResult.objects.create(task_id=operation.task_id, status="SUCCESS", result=json.dumps({"replayed": 3}))
    detail = api.get(f"/api/v1/operations/{operation.pk}").json()
    assert detail["state"] == "succeeded" and detail["result"] == {"replayed": 3}
    assert detail["progress"] == {"done": 3, "total": 3} and detail["error"] is None
    assert detail["finished_at"] is not None and detail["created_by"].startswith("api-key:")


def test_a_failed_operation_shows_celerys_error(api, tenant):
    operation = start_replay(tenant)
    result = {"exc_type": "OperationFailed", "exc_message": ["The job is paused."], "exc_module": "x"}
    TaskResult.objects.create(task_id=operation.task_id, status="FAILURE", result=json.dumps(result))
    detail = api.get(f"/api/v1/operations/{operation.pk}").json()
    assert (detail["state"], detail["error"], detail["result"]) == ("failed", "The job is paused.", None)


def test_the_list_is_paginated_newest_first(api, tenant):
    ids = [str(start_replay(tenant).pk) for _ in range(3)]
    first = api.get("/api/v1/operations?limit=2").json()
    assert [o["id"] for o in first["results"]] == ids[::-1][:2] and first["next"]
    second = api.get(first["next"]).json()
    assert [o["id"] for o in second["results"]] == [ids[0]] and second["next"] is None
    assert api.get("/api/v1/operations?kind=replay").status_code == 400


def test_an_idempotency_key_returns_the_same_operation(api, job):
    first = api.post("/api/v1/operations/replay", {"job": str(job.id)}, format="json", HTTP_IDEMPOTENCY_KEY="op-1")
    again = api.post("/api/v1/operations/replay", {"job": str(job.id)}, format="json", HTTP_IDEMPOTENCY_KEY="op-1")
    assert first.status_code == again.status_code == 202
    assert again.json()["id"] == first.json()["id"] and again["Idempotent-Replayed"] == "true"
    assert Operation.objects.count() == 1
    assert Operation.objects.get().idempotency_key == "op-1"
    other = api.post("/api/v1/operations/replay", {}, format="json", HTTP_IDEMPOTENCY_KEY="op-1")
    assert other.status_code == 409


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"job": "not-a-uuid"}, "job"),
        ({"status_code": 99}, "status_code"),
        ({"status_code": "five hundred"}, "status_code"),
        ({"error_kind": "gremlins"}, "error_kind"),
        ({"scheduled_after": "yesterday"}, "scheduled_after"),
        ({"scheduled_after": "2026-01-02T00:00:00Z", "scheduled_before": "2026-01-01T00:00:00Z"}, "scheduled_before"),
        ({"status": "failed"}, "status"),
    ],
)
def test_bad_replay_filters_are_400s_on_their_field(api, body, field):
    response = api.post("/api/v1/operations/replay", body, format="json")
    assert response.status_code == 400
    assert field in response.json()["error"]["fields"]
    assert Operation.objects.count() == 0


def test_bad_backfills_are_400s_on_their_field(api, tenant, other_tenant):
    end = (timezone.now() - timedelta(hours=1)).isoformat()
    start = (timezone.now() - timedelta(hours=2)).isoformat()
    once = JobFactory(tenant=tenant, schedule_type="once", cron_expression="", run_at=timezone.now())
    minutely = JobFactory(tenant=tenant, cron_expression="* * * * *")
    foreign = JobFactory(tenant=other_tenant)
    years_back = (timezone.now() - timedelta(days=800)).isoformat()
    cases = [
        ({"job": str(foreign.id), "start": start, "end": end}, "job"),  # another tenant's: no such job
        ({"job": str(once.id), "start": start, "end": end}, "job"),
        ({"job": str(minutely.id), "start": end, "end": start}, "end"),
        ({"job": str(minutely.id), "start": years_back, "end": end}, "end"),  # over max_backfill_runs
        ({"start": start, "end": end}, "job"),
    ]
    for body, field in cases:
        response = api.post("/api/v1/operations/backfill", body, format="json")
        assert response.status_code == 400, (body, response.json())
        assert field in response.json()["error"]["fields"], (body, response.json())
    assert Operation.objects.count() == 0
    ok = api.post("/api/v1/operations/backfill", {"job": str(minutely.id), "start": start, "end": end}, format="json")
    assert ok.status_code == 202 and ok.json()["kind"] == "backfill"


def test_operations_are_tenant_scoped(api, other_api, tenant, other_tenant):
    JobFactory(tenant=other_tenant)
    mine = start_replay(tenant)
    theirs = start_replay(other_tenant)
    assert api.get(f"/api/v1/operations/{theirs.pk}").status_code == 404
    assert other_api.get(f"/api/v1/operations/{mine.pk}").status_code == 404
    assert [o["id"] for o in api.get("/api/v1/operations").json()["results"]] == [str(mine.pk)]
    assert api.get("/api/v1/operations/nope").status_code == 404


def test_a_replay_never_touches_another_tenants_dead_letters(tenant, other_tenant):
    theirs = dead_letters(JobFactory(tenant=other_tenant), 5)
    operation = start_replay(tenant)
    assert services.operation_run(operation.pk, owner="test", pause=0) == {"replayed": 0}
    assert JobRun.objects.filter(id__in=theirs, status=RunStatus.FAILED).count() == 5
