"""The worker's claim on real PostgreSQL: the one-statement claim of runs whose job allows
concurrent runs (apps/jobs/transitions.py `claim_free`) and how `claim_runs` hands what it did not
take to the guarded claim."""

import pytest
from django.db import connection
from django.utils import timezone

from apps.delivery.claiming import claim_runs
from apps.jobs.models import ConcurrencyPolicy, JobRun, RunStatus
from tests.factories import JobFactory, queued_runs
from tests.support.locks import row_held_elsewhere

pytestmark = pytest.mark.django_db(transaction=True)

OWNER = "host:1:abcdef"


@pytest.fixture
def job(tenant):
    return JobFactory(
        tenant=tenant,
        target_headers={"Authorization": "Bearer s3cret", "X-Plain": "yes"},
        secret_header_names=["X-Plain"],
        target_body={"hello": ["wörld", 1]},
    )


def statements_during(fn):
    seen = []

    def count(execute, sql, params, many, context):
        seen.append(sql.split(None, 1)[0].upper())
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        result = fn()
    return result, seen


def test_one_statement_claims_the_runs_and_loads_them_as_the_orm_would(job):
    runs = queued_runs(job, 3)
    ids = [str(run.id) for run in runs]
    claimed, statements = statements_during(lambda: claim_runs(ids, owner=OWNER, now=timezone.now(), guarded_jobs=[]))
    assert statements == ["WITH"], "one round trip: lock, flip and read with the jobs"
    assert sorted(str(run.id) for run in claimed) == sorted(ids)
    for run in claimed:
        stored = JobRun.objects.select_related("definition").get(id=run.id)
        assert (run.status, run.attempt_count, run.lease_owner) == (RunStatus.RUNNING, 1, OWNER)
        assert (stored.status, stored.attempt_count, stored.lease_owner) == (RunStatus.RUNNING, 1, OWNER)
        assert stored.lease_expires_at > stored.started_at
        for field in JobRun._meta.concrete_fields:
            assert getattr(run, field.attname) == getattr(stored, field.attname), field.name
        for field in type(job)._meta.concrete_fields:
            assert getattr(run.definition, field.attname) == getattr(stored.definition, field.attname), field.name
        # Converted as a queryset converts them: JSON decoded, the header values decrypted.
        assert run.definition.target_headers == {"Authorization": "Bearer s3cret", "X-Plain": "yes"}
        assert run.definition.target_body == {"hello": ["wörld", 1]}
        assert run._state.adding is False


def test_runs_not_queued_are_left_as_they_are(job):
    queued, done = queued_runs(job, 2)
    JobRun.objects.filter(id=done.id).update(status=RunStatus.SUCCEEDED)
    claimed = claim_runs([str(queued.id), str(done.id)], owner=OWNER, now=timezone.now(), guarded_jobs=[])
    assert [run.id for run in claimed] == [queued.id]
    assert JobRun.objects.get(id=done.id).status == RunStatus.SUCCEEDED


def test_a_run_locked_by_another_claim_is_skipped_not_waited_for(job):
    held, free = queued_runs(job, 2)
    with row_held_elsewhere(JobRun, held.id):
        claimed = claim_runs([str(held.id), str(free.id)], owner=OWNER, now=timezone.now(), guarded_jobs=[])
    assert [run.id for run in claimed] == [free.id]
    assert JobRun.objects.get(id=held.id).status == RunStatus.QUEUED


def test_a_job_guarded_since_the_callers_read_is_claimed_under_its_lock(job):
    """The caller read no guarded job, but the policy changed to `forbid` since: the one statement
    leaves those runs, and the guarded claim applies the policy. Two runs of the job in one claim:
    the first goes, the second finds it busy and is skipped."""
    type(job).objects.filter(id=job.id).update(concurrency_policy=ConcurrencyPolicy.FORBID)
    runs = queued_runs(job, 2)
    claimed = claim_runs([str(run.id) for run in runs], owner=OWNER, now=timezone.now(), guarded_jobs=[])
    assert len(claimed) == 1
    statuses = sorted(JobRun.objects.filter(id__in=[r.id for r in runs]).values_list("status", flat=True))
    assert statuses == [RunStatus.RUNNING, RunStatus.SKIPPED]


def test_a_claim_repeated_by_its_owner_returns_what_it_took_already(job):
    """A retry of a claim whose COMMIT failed after it happened finds its runs `running` under its
    own lease: they are returned again, the attempt not counted twice."""
    (run,) = queued_runs(job, 1)
    first = claim_runs([str(run.id)], owner=OWNER, now=timezone.now(), guarded_jobs=[])
    again = claim_runs([str(run.id)], owner=OWNER, now=timezone.now(), guarded_jobs=[])
    other = claim_runs([str(run.id)], owner="host:2:fedcba", now=timezone.now(), guarded_jobs=[])
    assert [r.id for r in first] == [r.id for r in again] == [run.id]
    assert other == []
    assert JobRun.objects.get(id=run.id).attempt_count == 1


def test_two_runs_of_a_replace_job_in_one_claim_the_later_one_goes(job):
    type(job).objects.filter(id=job.id).update(concurrency_policy=ConcurrencyPolicy.REPLACE)
    earlier, later = queued_runs(job, 2)
    claimed = claim_runs([str(earlier.id), str(later.id)], owner=OWNER, now=timezone.now(), guarded_jobs=[job.id])
    assert [run.id for run in claimed] == [later.id]
    assert JobRun.objects.get(id=earlier.id).status == RunStatus.CANCELLED
    assert JobRun.objects.get(id=later.id).status == RunStatus.RUNNING


def test_after_taking_runs_a_busy_guarded_job_is_skipped_not_waited_for(job, tenant):
    """One claim with runs of an `allow` job (the one statement takes them) and of a job guarded
    since the caller's read whose row another session holds: waiting for that row while holding
    runs would invert the lock order, so its run stays `queued` and the claim returns at once."""
    free_run, *_ = queued_runs(job, 1)
    guarded_job = JobFactory(tenant=tenant, concurrency_policy=ConcurrencyPolicy.FORBID)
    (guarded_run,) = queued_runs(guarded_job, 1)
    ids = [str(free_run.id), str(guarded_run.id)]
    with row_held_elsewhere(type(job), guarded_job.id, lock_timeout="2s"):
        claimed = claim_runs(ids, owner=OWNER, now=timezone.now(), guarded_jobs=[])
    assert [run.id for run in claimed] == [free_run.id]
    assert JobRun.objects.get(id=guarded_run.id).status == RunStatus.QUEUED
