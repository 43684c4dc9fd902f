"""The jobs quota's count (apps/jobs/services.py `_LOCK_AND_COUNT_SQL`) reads the tenant's live
jobs only, through jobdef_tenant_live_idx, however many completed and deleted jobs the tenant
keeps for their history: it runs under the tenant's lock on every create, so a count that read
them all (42 ms at 300,000 completed jobs) would cap the tenant's creates at a few dozen a second."""

import json

import pytest
from django.db import connection
from django.test import override_settings

from apps.jobs.models import JobDefinition, JobStatus, partition_for
from apps.jobs.services import _LOCK_AND_COUNT_SQL, LIVE_EXCLUDED, _live_jobs_locked
from apps.tenants.services import tenant_create
from tests.factories import JobFactory
from tests.support.plans import indexes_in_plan

COUNT_SQL = _LOCK_AND_COUNT_SQL.split("; ", 1)[1]


@pytest.fixture
def history(db):
    """A tenant with 3,000 finished jobs (completed and deleted) and 4 live ones (one paused),
    beside another tenant's live jobs; analyzed."""
    tenant, other = tenant_create(slug="keeper", name="Keeper"), tenant_create(slug="other", name="Other")
    template = JobFactory.build(tenant=tenant)
    finished = []
    for n in range(3000):
        job = JobFactory.build(tenant=tenant, name=f"old-{n}", target_url=template.target_url)
        job.status = JobStatus.COMPLETED if n % 3 else JobStatus.DELETED
        job.next_fire_at = None
        job.partition = partition_for(job.id)
        finished.append(job)
    JobDefinition.objects.bulk_create(finished, batch_size=1000)
    live = [JobFactory(tenant=tenant) for _ in range(4)]
    JobDefinition.objects.filter(pk=live[0].pk).update(status=JobStatus.PAUSED)
    for _ in range(3):
        JobFactory(tenant=other)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobs_jobdefinition")
    return tenant


def _plan(tenant) -> list:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + COUNT_SQL, [tenant.pk, *LIVE_EXCLUDED])
        plan = cursor.fetchone()[0]
    return json.loads(plan) if isinstance(plan, str) else plan


def _rows_read(plan) -> int:
    """Rows the plan's scans returned plus those their filters removed."""
    total, stack = 0, [plan[0]["Plan"]]
    while stack:
        node = stack.pop()
        if "Scan" in node["Node Type"]:
            total += node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)
        stack.extend(node.get("Plans", []))
    return total


def test_the_count_reads_the_live_jobs_only(history):
    plan = _plan(history)
    assert "jobdef_tenant_live_idx" in indexes_in_plan(plan)
    assert _rows_read(plan) == 4  # not the 3,000 finished ones


def test_the_count_is_the_live_jobs_paused_included(history):
    assert _live_jobs_locked(history.pk) == 4


@override_settings(CHIME_QUOTA_MAX_JOBS=5)
def test_finished_jobs_leave_room_under_the_quota(history, client):
    from apps.tenants.services import api_key_create

    key = api_key_create(tenant=history).raw_key
    body = {
        "name": "fifth",
        "schedule": {"type": "cron", "expression": "0 * * * *"},
        "target": {"url": "https://example.com/h"},
    }
    auth = {"HTTP_AUTHORIZATION": f"Bearer {key}"}
    first = client.post("/api/v1/jobs", body, content_type="application/json", **auth)
    assert first.status_code == 201, first.content
    second = client.post("/api/v1/jobs", {**body, "name": "sixth"}, content_type="application/json", **auth)
    assert second.status_code == 403
    assert second.json()["error"]["limit"] == {"name": "max_jobs", "value": 5}
