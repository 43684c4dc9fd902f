"""Releasing due runs: fair across tenants, fenced by leases, published per priority tier."""

import base64
import json
from datetime import UTC, datetime, timedelta

import pytest
import redis
from django.conf import settings

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
        )
        for i in range(count)
    )


def test_a_burst_of_one_tenant_does_not_crowd_out_another(settings, tenant, other_tenant):
    settings.CHIME_TENANT_MAX_IN_FLIGHT = 10
    big = due_runs(JobFactory(tenant=tenant), 50)
    small = due_runs(JobFactory(tenant=other_tenant), 5)
    chosen = fair_selection(ALL, now=NOW, batch_size=20)
    assert set(chosen) >= {r.id for r in small}, "all of the small tenant's runs go out at once"
    assert len([i for i in chosen if i in {r.id for r in big}]) == 10, "the big tenant is held at its cap"
    # Interleaved: the first two picks are one run of each tenant.
    firsts = {JobRun.objects.get(id=i).tenant_id for i in chosen[:2]}
    assert firsts == {tenant.id, other_tenant.id}


def test_a_tenant_at_its_cap_waits_until_runs_finish(settings, tenant, other_tenant):
    settings.CHIME_TENANT_MAX_IN_FLIGHT = 10
    job = JobFactory(tenant=tenant)
    due_runs(job, 10, status=RunStatus.RUNNING, start=NOW - timedelta(hours=1))
    waiting = due_runs(job, 5)
    assert fair_selection(ALL, now=NOW, batch_size=100) == []
    JobRun.objects.filter(status=RunStatus.RUNNING).update(status=RunStatus.SUCCEEDED)
    assert set(fair_selection(ALL, now=NOW, batch_size=100)) == {r.id for r in waiting}


def test_runs_not_yet_due_stay(tenant):
    job = JobFactory(tenant=tenant)
    due_runs(job, 3, start=NOW + timedelta(seconds=1))
    assert fair_selection(ALL, now=NOW, batch_size=100) == []


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
        published[queue] = sorted(
            run_id for m in messages for run_id in json.loads(base64.b64decode(m["body"]))[0][0]
        )
    assert published == {
        "runs.high": sorted(str(r.id) for r in high_runs),
        "runs.default": [],
        "runs.low": sorted(str(r.id) for r in low_runs),
    }
    # Released once: a second pass (or a second scheduler) finds nothing to release.
    assert release_due_runs(leases=leases, now=NOW, batch_size=100) == 0
