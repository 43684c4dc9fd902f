"""What the scheduler materializes when occurrences are late: every policy, every reason recorded."""

from datetime import UTC, datetime, timedelta

import pytest

from apps.jobs.models import JobDefinition, JobRun, JobStatus, RunStatus, ScheduleType
from apps.scheduler.leases import LeaseKeeper, ensure_lease_rows
from apps.scheduler.services import materialize_due_runs
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 11, 2, 3, 0, tzinfo=UTC)


@pytest.fixture
def make_job(tenant):
    def make(**fields):
        defaults = {"tenant": tenant, "cron_expression": "0 * * * *", "next_fire_at": T0}
        return JobFactory(**{**defaults, **fields})

    return make


def materialize(now, partitions=None):
    return materialize_due_runs(partitions=partitions or list(range(64)), now=now, batch_size=1000)


def runs_of(job):
    return list(JobRun.objects.filter(definition=job).order_by("scheduled_for"))


def test_an_on_time_occurrence_fires_under_every_policy(make_job):
    jobs = [make_job(misfire_policy=policy) for policy in ("catch_up", "skip", "coalesce")]
    materialize(T0 + timedelta(seconds=1))
    for job in jobs:
        assert [(r.scheduled_for, r.status) for r in runs_of(job)] == [(T0, RunStatus.SCHEDULED)]
        job.refresh_from_db()
        assert job.next_fire_at == T0 + timedelta(hours=1)
        assert job.last_scheduled_for == T0


def test_catch_up_materializes_every_missed_occurrence(make_job):
    job = make_job(misfire_policy="catch_up")
    materialize(T0 + timedelta(hours=5, minutes=30))  # the scheduler was down for five and a half hours
    assert [r.scheduled_for for r in runs_of(job)] == [T0 + timedelta(hours=h) for h in range(6)]
    assert {r.status for r in runs_of(job)} == {RunStatus.SCHEDULED}
    job.refresh_from_db()
    assert job.next_fire_at == T0 + timedelta(hours=6)


def test_catch_up_stops_at_the_limit_and_says_why_for_the_rest(make_job):
    job = make_job(misfire_policy="catch_up", catch_up_limit=2)
    materialize(T0 + timedelta(hours=4, minutes=30))
    runs = runs_of(job)
    assert [(r.scheduled_for.hour, r.status) for r in runs] == [
        (3, "skipped"),
        (4, "skipped"),
        (5, "skipped"),
        (6, "scheduled"),
        (7, "scheduled"),
    ]
    assert runs[0].status_reason == "Beyond catch_up_limit (2)."


def test_skip_records_missed_occurrences_and_fires_only_what_is_on_time(make_job):
    job = make_job(misfire_policy="skip")
    now = T0 + timedelta(hours=2, seconds=10)
    materialize(now)
    runs = runs_of(job)
    assert [(r.scheduled_for.hour, r.status) for r in runs] == [(3, "skipped"), (4, "skipped"), (5, "scheduled")]
    assert "misfire policy 'skip'" in runs[0].status_reason
    assert runs[0].finished_at == now


def test_coalesce_makes_one_run_carrying_the_first_and_last_missed_times(make_job):
    job = make_job(misfire_policy="coalesce")
    materialize(T0 + timedelta(hours=3, minutes=30))
    (run,) = runs_of(job)
    assert run.status == RunStatus.SCHEDULED
    assert (run.coalesced_count, run.coalesced_first_at, run.coalesced_last_at) == (4, T0, T0 + timedelta(hours=3))
    assert run.scheduled_for == T0 + timedelta(hours=3)


def test_nothing_older_than_the_lookback_is_materialized_one_by_one(make_job, settings):
    settings.CHIME_MISFIRE_LOOKBACK_SECONDS = 3 * 3600
    job = make_job(misfire_policy="catch_up", cron_expression="* * * * *")
    now = T0 + timedelta(days=7)
    materialize(now)
    runs = runs_of(job)
    summary = runs[0]
    assert summary.status == RunStatus.SKIPPED
    assert summary.scheduled_for == T0
    assert "lookback" in summary.status_reason
    assert summary.coalesced_last_at == now - timedelta(hours=3)
    fired = [r.scheduled_for for r in runs if r.status == RunStatus.SCHEDULED]
    # The two within the 60 s grace (now - 1 min, now) are on time; of the late ones, the newest
    # catch_up_limit (100) fire and the rest are skipped with a reason.
    assert fired == [now - timedelta(minutes=m) for m in range(101, -1, -1)]
    skipped = [r for r in runs[1:] if r.status == RunStatus.SKIPPED]
    assert len(skipped) == 3 * 60 - 102 and all(r.status_reason == "Beyond catch_up_limit (100)." for r in skipped)


def test_a_once_job_fires_once_then_is_completed(make_job):
    job = make_job(schedule_type=ScheduleType.ONCE, cron_expression="", run_at=T0)
    materialize(T0)
    materialize(T0 + timedelta(minutes=5))
    assert len(runs_of(job)) == 1
    job.refresh_from_db()
    assert (job.status, job.next_fire_at) == (JobStatus.COMPLETED, None)


@pytest.mark.parametrize("late", [timedelta(0), timedelta(seconds=59), timedelta(minutes=5), timedelta(days=2)])
@pytest.mark.parametrize("policy", ["catch_up", "skip", "coalesce"])
def test_once_jobs_get_the_runs_the_planner_gives_them(make_job, late, policy):
    """The `once` fast path of materialize_due_runs (on time, no jitter) writes exactly the run and
    the job update that plan_definition gives; late or jittered ones are planned as before."""
    from apps.jobs.planning import plan_definition

    jobs = [
        make_job(schedule_type=ScheduleType.ONCE, cron_expression="", run_at=T0, misfire_policy=policy, **extra)
        for extra in ({}, {"jitter_seconds": 30}, {"priority": "high"})
    ]
    now = T0 + late
    expected = {}
    for job in jobs:
        plan = plan_definition(JobDefinition.objects.get(pk=job.pk), now=now)
        expected[job.pk] = [
            (p.scheduled_for, p.scheduled_for + job.jitter_offset, bool(p.skipped_reason)) for p in plan.runs
        ]
    materialize(now)
    for job in jobs:
        runs = runs_of(job)
        got = [(r.scheduled_for, r.available_at, r.status == RunStatus.SKIPPED) for r in runs]
        assert got == expected[job.pk]
        assert all((r.trigger, r.priority, r.partition) == ("schedule", job.priority, job.partition) for r in runs)
        job.refresh_from_db()
        assert (job.status, job.next_fire_at, job.last_scheduled_for) == (JobStatus.COMPLETED, None, T0)


def test_runs_are_materialized_ahead_but_released_at_their_time(make_job, settings):
    settings.CHIME_SCHEDULER_LOOKAHEAD_SECONDS = 2
    job = make_job()
    materialize(T0 - timedelta(seconds=1))
    (run,) = runs_of(job)
    assert run.available_at == T0
    assert run.status == RunStatus.SCHEDULED


def test_jitter_delays_delivery_by_a_stable_offset_within_the_bound(make_job):
    jobs = [make_job(jitter_seconds=300) for _ in range(20)]
    materialize(T0)
    offsets = set()
    for job in jobs:
        (run,) = runs_of(job)
        offset = run.available_at - run.scheduled_for
        assert timedelta(0) <= offset <= timedelta(seconds=300)
        assert offset == JobDefinition.objects.get(pk=job.pk).jitter_offset  # the same after a reload
        offsets.add(offset)
    assert len(offsets) > 10, "offsets spread the jobs out"


def test_materializing_twice_creates_no_duplicate_run(make_job):
    job = make_job()
    materialize(T0)
    JobDefinition.objects.filter(pk=job.pk).update(next_fire_at=T0)  # as if a second scheduler saw it too
    materialize(T0)
    assert len(runs_of(job)) == 1


def test_a_scheduler_only_touches_its_partitions(make_job):
    job = make_job()
    others = [p for p in range(64) if p != job.partition]
    materialize(T0, partitions=others)
    assert runs_of(job) == []
    materialize(T0, partitions=[job.partition])
    assert len(runs_of(job)) == 1


def test_leases_fence_a_scheduler_that_lost_its_partition(make_job):
    from apps.scheduler.models import SchedulerLease
    from apps.scheduler.services import release_due_runs

    ensure_lease_rows()
    job = make_job()
    old = LeaseKeeper(candidates=[job.partition], pinned=True)
    old.refresh()
    assert old.partitions == [job.partition]
    materialize(T0, partitions=[job.partition])
    # The old owner stalls; its lease expires and another process takes the partition over.
    SchedulerLease.objects.filter(partition=job.partition).update(expires_at=T0 - timedelta(days=1))
    new = LeaseKeeper(candidates=[job.partition], pinned=True)
    new.refresh()
    assert new.held[job.partition] == old.held[job.partition] + 1
    # The old process wakes up and tries to enqueue: fenced off, nothing is released.
    assert release_due_runs(leases=old, now=T0 + timedelta(seconds=1), batch_size=100) == 0
    assert runs_of(job)[0].status == RunStatus.SCHEDULED
