"""The dead-letter list (apps.jobs.listings.dead_letters): one tenant's failed runs, the latest
failure first, read in that order from jobrun_dead_letters_idx (a partial index of the failed runs)
instead of sorting every failed run of the tenant: the history bench (bench/history.py, issue #14)
measured the sort at 10M runs."""

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from apps.jobs.listings import dead_letters
from apps.jobs.models import JobRun, RunStatus
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def _runs(job, statuses, now):
    return [
        JobRun.objects.create(
            tenant=job.tenant,
            definition=job,
            partition=job.partition,
            scheduled_for=now - timedelta(minutes=i),
            available_at=now - timedelta(minutes=i),
            status=status,
            attempt_count=1,
            finished_at=now - timedelta(minutes=i) + timedelta(seconds=(7 * i) % 11),
        )
        for i, status in enumerate(statuses)
    ]


def test_dead_letters_are_the_tenants_failed_runs_latest_failure_first(tenant, other_tenant):
    now = timezone.now()
    mine = _runs(JobFactory(tenant=tenant), [RunStatus.FAILED, RunStatus.SUCCEEDED] * 6, now)
    theirs = _runs(JobFactory(tenant=other_tenant), [RunStatus.FAILED] * 3, now)
    listed = list(dead_letters(tenant=tenant))
    failed = [r for r in mine if r.status == RunStatus.FAILED]
    assert [r.id for r in listed] == [r.id for r in sorted(failed, key=lambda r: r.finished_at, reverse=True)]
    assert not {r.id for r in theirs} & {r.id for r in listed}


def test_dead_letters_page_reads_the_partial_index_in_order_without_a_sort(tenant):
    _runs(JobFactory(tenant=tenant), [RunStatus.FAILED, RunStatus.SUCCEEDED] * 20, timezone.now())
    sql, params = dead_letters(tenant=tenant)[:51].query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobs_jobrun")
        # A tiny table: the planner's choice between an ordered index scan and sorting 20 rows is a
        # coin toss (it flipped with the statistics earlier tests left). Sorts off: a plan without
        # one exists only if an index serves the page's order, which is what is checked here.
        for setting in ("enable_seqscan", "enable_sort", "enable_bitmapscan"):
            cursor.execute(f"SET LOCAL {setting} = off")
        cursor.execute("EXPLAIN " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "jobrun_dead_letters_idx" in plan, plan
    assert "Sort" not in plan.split("SubPlan")[0], plan  # the page's order comes from the index
