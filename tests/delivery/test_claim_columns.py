"""The one-statement claim returns only the columns delivery reads (apps/jobs/transitions.py
CLAIMED_RUN_FIELDS / CLAIMED_JOB_FIELDS); the others are deferred, and reading one would cost a
query per run. These deliveries take every path a claimed run can take (success, retry, dead
letter, 410 Gone, a paused job's cancellation, secret headers redacted in the attempt) and fail if
any of them reads a deferred field of a run or its job."""

import pytest
from django.db.models import Model
from django.utils import timezone

from apps.delivery.services import deliver_runs
from apps.jobs.models import JobDefinition, JobRun, JobStatus, RunStatus
from apps.jobs.transitions import CLAIMED_JOB_FIELDS, CLAIMED_RUN_FIELDS
from tests.factories import JobFactory, queued_runs
from tests.support.receiver import Reply

pytestmark = pytest.mark.django_db(transaction=True)


def queued_run(job) -> JobRun:
    return queued_runs(job, 1)[0]


@pytest.fixture
def deferred_reads(monkeypatch):
    """(model, fields) of every deferred field read (Django's descriptor calls refresh_from_db)."""
    reads = []
    original = Model.refresh_from_db

    def spy(self, using=None, fields=None, from_queryset=None):
        if isinstance(self, JobRun | JobDefinition):
            reads.append((type(self).__name__, tuple(fields or ())))
        return original(self, using=using, fields=fields, from_queryset=from_queryset)

    monkeypatch.setattr(Model, "refresh_from_db", spy)
    return reads


def test_delivering_every_outcome_reads_no_deferred_field(tenant, receiver, deferred_reads):
    replies = {"/ok": Reply(), "/retry": Reply(status=503), "/dead": Reply(status=500), "/gone": Reply(status=410)}
    receiver.respond = lambda delivery: replies[delivery.path]
    url = f"{receiver.url}"
    jobs = {
        "ok": JobFactory(
            tenant=tenant,
            target_url=f"{url}/ok",
            target_headers={"Authorization": "Bearer s3cret", "X-Env": "prod"},
            secret_header_names=["Authorization"],
            target_body={"hello": "world"},
        ),
        "retry": JobFactory(tenant=tenant, target_url=f"{url}/retry", retry_max_attempts=3),
        "dead": JobFactory(tenant=tenant, target_url=f"{url}/dead", retry_max_attempts=1, failure_threshold=1),
        "gone": JobFactory(tenant=tenant, target_url=f"{url}/gone"),
        "paused": JobFactory(tenant=tenant, target_url=f"{url}/ok"),
    }
    runs = {name: queued_run(job) for name, job in jobs.items()}
    JobDefinition.objects.filter(id=jobs["paused"].id).update(status=JobStatus.PAUSED)

    report = deliver_runs([str(run.id) for run in runs.values()])

    assert deferred_reads == []
    assert report.as_dict()["claimed"] == 5
    statuses = {name: JobRun.objects.get(id=run.id).status for name, run in runs.items()}
    assert statuses == {
        "ok": RunStatus.SUCCEEDED,
        "retry": RunStatus.RETRYING,
        "dead": RunStatus.FAILED,
        "gone": RunStatus.FAILED,
        "paused": RunStatus.CANCELLED,
    }
    attempt = JobRun.objects.get(id=runs["ok"].id).attempts.get()
    assert attempt.request_headers["Authorization"] != "Bearer s3cret"  # redacted from the job's fields
    assert JobDefinition.objects.get(id=jobs["gone"].id).status == JobStatus.PAUSED


def test_a_field_left_out_is_still_read_correctly_with_a_query(tenant, receiver, deferred_reads):
    # The trap the test above guards: a deferred field is not wrong, only a query per run.
    from apps.delivery.claiming import claim_runs

    run = queued_run(JobFactory(tenant=tenant, target_url=f"{receiver.url}/ok"))
    (claimed,) = claim_runs([str(run.id)], owner="w:1:test", now=timezone.now(), guarded_jobs=[])
    assert "available_at" not in CLAIMED_RUN_FIELDS and "created_at" not in CLAIMED_JOB_FIELDS
    assert claimed.available_at == run.available_at
    assert claimed.definition.created_at == run.definition.created_at
    assert deferred_reads == [("JobRun", ("available_at",)), ("JobDefinition", ("created_at",))]
