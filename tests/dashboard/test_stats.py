"""apps/jobs/stats.py: the overview's numbers, per minute."""

from datetime import UTC, datetime, timedelta

import pytest

from apps.jobs.models import JobRun, RunStatus, Trigger
from apps.jobs.stats import percentile, tenant_overview

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 6, 1, 12, 30, 30, tzinfo=UTC)


def run(job, *, status, scheduled, queued=None, started=None, finished=None, attempts=1, trigger=Trigger.SCHEDULE):
    return JobRun.objects.create(
        tenant_id=job.tenant_id, definition=job, partition=job.partition, scheduled_for=scheduled,
        available_at=scheduled, status=status, queued_at=queued, started_at=started, finished_at=finished,
        attempt_count=attempts, trigger=trigger,
    )  # fmt: skip


def test_percentile_is_nearest_rank():
    assert percentile([], 0.95) is None
    assert percentile([3.0], 0.95) == 3.0
    assert percentile([float(i) for i in range(1, 101)], 0.95) == 95.0


def test_counts_success_rate_and_lag_per_minute(job):
    t = NOW - timedelta(minutes=10)
    for i, lag in enumerate([0.2, 0.4, 5.0]):
        s = t + timedelta(seconds=i)
        run(
            job,
            status=RunStatus.SUCCEEDED,
            scheduled=s,
            queued=s,
            started=s + timedelta(seconds=lag),
            finished=s + timedelta(seconds=lag + 1),
        )
    run(
        job,
        status=RunStatus.FAILED,
        scheduled=t + timedelta(seconds=10),
        queued=t + timedelta(seconds=10),
        started=t + timedelta(seconds=10.1),
        finished=t + timedelta(seconds=12),
    )
    # A retry (attempt 3) and a backfill say nothing about firing on time.
    run(job, status=RunStatus.SUCCEEDED, scheduled=t - timedelta(hours=3), started=t, finished=t, attempts=3)
    run(
        job,
        status=RunStatus.SUCCEEDED,
        scheduled=t - timedelta(days=3),
        started=t,
        finished=t,
        trigger=Trigger.BACKFILL,
    )
    # Finished more than an hour ago: outside the window.
    old = NOW - timedelta(hours=2)
    run(job, status=RunStatus.SUCCEEDED, scheduled=old, started=old, finished=old)

    overview = tenant_overview(tenant=job.tenant, now=NOW)
    assert len(overview.minutes) == 60
    assert (overview.succeeded, overview.failed) == (5, 1)
    assert overview.success_rate == pytest.approx(5 / 6)
    assert overview.p95_lag_seconds == 5.0
    minute = next(m for m in overview.minutes if m.start == t.replace(second=0))
    assert (minute.succeeded, minute.failed) == (5, 1) and minute.p95_lag_seconds == 5.0
    assert overview.oldest_queued_seconds is None and overview.queued_now == 0


def test_age_of_the_oldest_queued_run_over_the_hour(job):
    a = NOW - timedelta(minutes=20)
    run(
        job,
        status=RunStatus.SUCCEEDED,
        scheduled=a,
        queued=a,
        started=a + timedelta(minutes=5),
        finished=a + timedelta(minutes=5),
    )
    b = NOW - timedelta(minutes=3, seconds=30)
    run(job, status=RunStatus.QUEUED, scheduled=b, queued=b, attempts=0)
    overview = tenant_overview(tenant=job.tenant, now=NOW)
    by_end = {m.start + timedelta(minutes=1): m.oldest_queued_seconds for m in overview.minutes}
    assert by_end[datetime(2026, 6, 1, 12, 11, tzinfo=UTC)] == pytest.approx(30)  # a, queued at 12:10:30
    assert by_end[datetime(2026, 6, 1, 12, 15, tzinfo=UTC)] == pytest.approx(270)
    assert by_end[datetime(2026, 6, 1, 12, 25, tzinfo=UTC)] == 0  # a started at 12:15:30; b comes at 12:27
    assert overview.minutes[-1].oldest_queued_seconds == pytest.approx(210)  # b, at "now"
    assert overview.oldest_queued_seconds == pytest.approx(210) and overview.queued_now == 1


def test_other_tenants_runs_are_not_counted(job, other_job):
    t = NOW - timedelta(minutes=1)
    run(other_job, status=RunStatus.FAILED, scheduled=t, started=t, finished=t)
    overview = tenant_overview(tenant=job.tenant, now=NOW)
    assert overview.finished == 0 and overview.success_rate is None
