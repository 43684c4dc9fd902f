"""Releasing due runs: fair across tenants, fenced by leases, published per priority tier."""

import base64
import itertools
import json
from datetime import UTC, datetime, timedelta

import pytest
import redis
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.jobs.models import JobRun, RunStatus
from apps.scheduler.leases import LeaseKeeper, ensure_lease_rows
from apps.scheduler.services import fair_selection, release_due_runs
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
ALL = list(range(64))


def due_runs(job, count, *, status=RunStatus.SCHEDULED, start=NOW - timedelta(minutes=1)):
    return JobRun.objects.bulk_create(
        JobRun(
            tenant=job.tenant,
            definition=job,
            partition=job.partition,
            priority=job.priority,
            scheduled_for=start + timedelta(seconds=i),
            available_at=start + timedelta(seconds=i),
            status=status,
            queued_at=NOW - timedelta(seconds=5) if status == RunStatus.QUEUED else None,
        )
        for i in range(count)
    )


def ids(selection):
    return [run_id for run_id, _ in selection]


def test_a_burst_of_one_tenant_does_not_crowd_out_another(tenant, other_tenant):
    big = due_runs(JobFactory(tenant=tenant), 50)
    small = due_runs(JobFactory(tenant=other_tenant), 5, start=NOW - timedelta(seconds=30))  # due later
    chosen = ids(fair_selection(ALL, now=NOW, batch_size=20))
    assert len(chosen) == 20
    assert set(chosen) >= {r.id for r in small}, "all of the small tenant's runs go out in the first batch"
    # Round-robin: the first picks alternate between the tenants.
    owners = [JobRun.objects.get(id=i).tenant_id for i in chosen[:4]]
    assert owners.count(tenant.id) == 2 and owners.count(other_tenant.id) == 2
    assert [i for i in chosen if i in {r.id for r in big}] == [r.id for r in big[:15]], "oldest first"


def test_runs_due_at_the_same_instant_are_shared_round_robin(tenant, other_tenant):
    """A spike: every run of a tenant due at one instant (a tie in available_at, which the
    candidates query must not resolve by reading the whole backlog)."""
    instant = NOW - timedelta(seconds=1)
    big = {r.id for r in due_runs(JobFactory(tenant=tenant), 30)}
    other = {r.id for r in due_runs(JobFactory(tenant=other_tenant), 30)}
    JobRun.objects.filter(id__in=big | other).update(available_at=instant)
    chosen = ids(fair_selection(ALL, now=NOW, batch_size=20))
    assert len(chosen) == len(set(chosen)) == 20
    assert len(set(chosen) & big) == 10 and len(set(chosen) & other) == 10
    owners = [JobRun.objects.get(id=i).tenant_id for i in chosen]
    assert all(a != b for a, b in itertools.pairwise(owners)), "the tenants alternate"


def test_a_full_queue_holds_back_its_own_tier_only(settings, tenant):
    settings.CHIME_MAX_QUEUED_RUNS = 10
    low, high = JobFactory(tenant=tenant, priority="low"), JobFactory(tenant=tenant, priority="high")
    due_runs(low, 10, status=RunStatus.QUEUED, start=NOW - timedelta(hours=1))
    waiting_low = due_runs(low, 5)
    urgent = due_runs(high, 3)
    assert set(ids(fair_selection(ALL, now=NOW, batch_size=100))) == {r.id for r in urgent}
    JobRun.objects.filter(status=RunStatus.QUEUED).update(status=RunStatus.SUCCEEDED)
    assert set(ids(fair_selection(ALL, now=NOW, batch_size=100))) == {r.id for r in waiting_low + urgent}


def test_a_tier_is_topped_up_once_a_quarter_of_its_budget_is_free_or_a_while_passed(settings, tenant):
    """Each release pays the fairness queries whatever it takes; a queue still three quarters full
    waits until a batch worth them is free (CHIME_RELEASE_MIN_ROOM), or until
    CHIME_RELEASE_MAX_WAIT_SECONDS passed since the tier's last top-up."""
    settings.CHIME_MAX_QUEUED_RUNS = 20
    settings.CHIME_RELEASE_MAX_WAIT_SECONDS = 3600
    job = JobFactory(tenant=tenant)
    queued = due_runs(job, 16, status=RunStatus.QUEUED, start=NOW - timedelta(hours=1))
    waiting = due_runs(job, 30)
    assert fair_selection(ALL, now=NOW, batch_size=100) == [], "4 of 20 free: less than a quarter"
    JobRun.objects.filter(id=queued[0].id).update(status=RunStatus.SUCCEEDED)
    chosen = ids(fair_selection(ALL, now=NOW, batch_size=100))
    assert chosen == [r.id for r in waiting[:5]], "5 of 20 free: the tier is filled up again"
    JobRun.objects.filter(id__in=chosen).update(status=RunStatus.QUEUED, queued_at=NOW)
    JobRun.objects.filter(id__in=[r.id for r in queued[1:5]]).update(status=RunStatus.SUCCEEDED)
    assert fair_selection(ALL, now=NOW, batch_size=100) == [], "4 free again, just topped up"
    settings.CHIME_RELEASE_MAX_WAIT_SECONDS = 0
    assert ids(fair_selection(ALL, now=NOW, batch_size=100)) == [r.id for r in waiting[5:9]], "waited long enough"


def test_runs_stranded_in_queued_do_not_hold_the_budget(settings, tenant, other_tenant):
    """Runs queued longer than CHIME_REQUEUE_AFTER lost their message (a broker that came back
    empty, a publisher that crashed): they must not keep the tier full for every other tenant."""
    settings.CHIME_MAX_QUEUED_RUNS = 10
    stranded = due_runs(JobFactory(tenant=tenant), 10, status=RunStatus.QUEUED)
    JobRun.objects.filter(id__in=[r.id for r in stranded]).update(
        queued_at=NOW - settings.CHIME_REQUEUE_AFTER - timedelta(seconds=1)
    )
    cron = due_runs(JobFactory(tenant=other_tenant), 3)
    assert set(ids(fair_selection(ALL, now=NOW, batch_size=100))) == {r.id for r in cron}
    JobRun.objects.filter(id__in=[r.id for r in stranded]).update(queued_at=NOW - timedelta(seconds=1))
    assert fair_selection(ALL, now=NOW, batch_size=100) == [], "deliverable queued runs still fill the tier"


def test_high_priority_goes_first_even_behind_an_older_low_backlog(tenant):
    low = due_runs(JobFactory(tenant=tenant, priority="low"), 5, start=NOW - timedelta(minutes=5))
    high = due_runs(JobFactory(tenant=tenant, priority="high"), 2)
    chosen = ids(fair_selection(ALL, now=NOW, batch_size=3))
    assert chosen[:2] == [r.id for r in high] and chosen[2] == low[0].id


def test_runs_not_yet_due_stay(tenant):
    due_runs(JobFactory(tenant=tenant), 3, start=NOW + timedelta(seconds=1))
    assert fair_selection(ALL, now=NOW, batch_size=100) == []


def test_only_the_given_partitions(tenant):
    job = JobFactory(tenant=tenant)
    due_runs(job, 2)
    assert fair_selection([p for p in ALL if p != job.partition], now=NOW, batch_size=100) == []


@pytest.fixture
def broker():
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.flushdb()
    yield client
    client.flushdb()


def test_release_flips_to_queued_and_publishes_per_priority_tier(tenant, broker, redis_required):
    ensure_lease_rows()
    high, low = JobFactory(tenant=tenant, priority="high"), JobFactory(tenant=tenant, priority="low")
    leases = LeaseKeeper(candidates=sorted({high.partition, low.partition}), pinned=True)
    leases.refresh()
    high_runs, low_runs = due_runs(high, 3), due_runs(low, 2)

    assert release_due_runs(leases=leases, now=NOW, batch_size=100) == 5

    assert set(JobRun.objects.values_list("status", flat=True)) == {RunStatus.QUEUED}
    published = {}
    for queue in ("runs.high", "runs.default", "runs.low"):
        messages = [json.loads(m) for m in broker.lrange(queue, 0, -1)]
        published[queue] = sorted(run_id for m in messages for run_id in json.loads(base64.b64decode(m["body"]))[0][0])
    assert published == {
        "runs.high": sorted(str(r.id) for r in high_runs),
        "runs.default": [],
        "runs.low": sorted(str(r.id) for r in low_runs),
    }
    # Released once: a second pass (or a second scheduler) finds nothing to release.
    assert release_due_runs(leases=leases, now=NOW, batch_size=100) == 0


def test_one_release_reads_the_releasable_tenants_once_and_skips_empty_tiers(tenant, other_tenant):
    """The tenants with releasable runs are read in one skip scan for every tier (it used to be
    one scan per tier, the whole scan again for each tier a spike leaves empty), and a tier with
    nothing releasable sends no candidates query."""
    urgent = due_runs(JobFactory(tenant=tenant, priority="high"), 3)
    normal = due_runs(JobFactory(tenant=other_tenant), 4)
    with CaptureQueriesContext(connection) as queries:
        chosen = fair_selection(ALL, now=NOW, batch_size=100)
    assert chosen == [(r.id, "high") for r in urgent] + [(r.id, "default") for r in normal]
    sql = [q["sql"] for q in queries.captured_queries]
    assert sum("WITH RECURSIVE" in s for s in sql) == 1
    candidates = [s for s in sql if "CROSS JOIN LATERAL" in s and "OFFSET" in s]
    assert len(candidates) == 2, "high and default; nothing is releasable in low"
    assert all("'low'" not in s for s in candidates)
