"""POST /api/v1/jobs/batch (docs/api.md#batch-create): all or nothing, every bad item named, one
bulk insert, the jobs quota for the whole batch, Idempotency-Key, the rate-limit weight, tenant
isolation, and jobs that fire like any other."""

import json
from datetime import UTC, datetime, timedelta

import pytest
import redis
from django.conf import settings as django_settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.delivery.services import deliver_runs
from apps.jobs.models import JobDefinition, JobRun, RunStatus, partition_for
from apps.jobs.secrets import ENCRYPTED_PREFIX
from apps.scheduler.services import materialize_due_runs
from apps.tenants.models import TenantLimits
from apps.tenants.ratelimit import reset_local

pytestmark = pytest.mark.django_db

BATCH = "/api/v1/jobs/batch"


def job(index: int, **overrides) -> dict:
    return {
        "name": f"job-{index}",
        "schedule": {"type": "cron", "expression": f"{index % 60} * * * *", "timezone": "Europe/Berlin"},
        "target": {
            "url": f"https://example.com/hook/{index}",
            "headers": {"Authorization": f"Bearer secret-{index}", "X-Team": "billing"},
            "body": {"index": index},
        },
        **overrides,
    }


@pytest.fixture(autouse=True)
def clean_limits():
    """Rate counts live in Redis across tests: start each test with none."""
    client = redis.Redis.from_url(django_settings.REDIS_URL)
    for key in client.scan_iter("chime:limit:*"):
        client.delete(key)
    reset_local()


def post(api, jobs, **headers):
    return api.post(BATCH, {"jobs": jobs}, format="json", **headers)


def test_it_creates_every_job_in_order_with_what_a_single_create_stores(api, tenant):
    response = post(api, [job(k) for k in range(5)])
    assert response.status_code == 201, response.json()
    created = response.json()["jobs"]
    assert [j["name"] for j in created] == [f"job-{k}" for k in range(5)]
    single = api.post("/api/v1/jobs", job(99), format="json").json()
    assert {k for k in created[0]} == {k for k in single}
    for body, k in zip(created, range(5), strict=True):
        assert body["status"] == "active" and body["next_fire_at"].endswith("Z")
        assert body["target"]["headers"] == {"Authorization": "<redacted>", "X-Team": "billing"}
        stored = JobDefinition.objects.get(pk=body["id"])
        assert stored.tenant_id == tenant.id
        assert stored.partition == partition_for(stored.id)
        assert stored.target_headers["Authorization"] == f"Bearer secret-{k}"
        assert stored.next_fire_at == stored.schedule().next_after(stored.created_at)
    with connection.cursor() as cursor:  # header values are encrypted at rest, as for one job
        cursor.execute("SELECT target_headers FROM jobs_jobdefinition WHERE id = %s", [created[0]["id"]])
        raw = cursor.fetchone()[0]
    raw = json.loads(raw) if isinstance(raw, str) else raw
    assert raw["Authorization"].startswith(ENCRYPTED_PREFIX)


def test_a_thousand_jobs_go_in_with_one_insert_and_past_the_single_request_body_limit(api, settings):
    settings.CHIME_QUOTA_MAX_JOBS = 2000
    jobs = [job(k, target={"url": f"https://example.com/hook/{k}", "body": {"pad": "x" * 200}}) for k in range(1000)]
    assert len(json.dumps({"jobs": jobs})) > settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    with CaptureQueriesContext(connection) as queries:
        response = post(api, jobs)
    assert response.status_code == 201, response.content[:500]
    inserts = [q["sql"] for q in queries.captured_queries if q["sql"].startswith('INSERT INTO "jobs_jobdefinition"')]
    assert len(inserts) == 1
    assert JobDefinition.objects.count() == 1000


def test_a_paused_job_and_a_once_job_are_stored_as_a_single_create_stores_them(api):
    when = (datetime.now(UTC) + timedelta(hours=1)).replace(microsecond=0)
    response = post(api, [job(1, enabled=False), job(2, schedule={"type": "once", "run_at": when.isoformat()}), job(3)])
    assert response.status_code == 201, response.json()
    paused, once, _ = response.json()["jobs"]
    assert (paused["status"], paused["enabled"]) == ("paused", False)
    assert datetime.fromisoformat(once["next_fire_at"]) == when


def test_every_bad_item_is_named_with_its_field_and_nothing_is_created(api, settings):
    settings.CHIME_QUOTA_MAX_RETRY_ATTEMPTS = 10
    long_ago = (datetime.now(UTC) - timedelta(days=3)).isoformat()
    jobs = (
        [
            job(0),
            job(1, schedule={"type": "cron", "expression": "61 * * * *"}),
            job(2),
            {"name": 3},
            job(4, schedule={"type": "once", "run_at": long_ago}),
            job(5, retry={"max_attempts": 20}),
            job(6, target={"url": "ftp://example.com/x"}),
        ]
        + [job(k) for k in range(7, 11)]
        + [job(11, priority="urgent")]
    )
    response = post(api, jobs)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid"
    fields = error["fields"]
    assert set(fields) == {
        "jobs.1.schedule.expression",
        "jobs.3.name",
        "jobs.3.schedule",
        "jobs.3.target",
        "jobs.4.schedule.run_at",
        "jobs.5.retry.max_attempts",
        "jobs.6.target.url",
        "jobs.11.priority",
    }, fields
    assert list(fields) == sorted(fields, key=lambda path: int(path.split(".")[1])), "in item order"
    assert error["message"].startswith("jobs.1.schedule.expression: ")
    assert "max_retry_attempts" in fields["jobs.5.retry.max_attempts"][0]
    assert JobDefinition.objects.count() == 0


def test_the_envelope_is_checked_too_many_none_and_not_a_list(api):
    over = post(api, [job(k) for k in range(1001)])
    assert over.status_code == 400
    assert over.json()["error"]["fields"] == {"jobs": ["A batch holds at most 1000 jobs; this one has 1001: split it."]}
    assert post(api, []).json()["error"]["fields"] == {"jobs": ["A batch holds at least one job."]}
    assert api.post(BATCH, {"jobs": {"name": "x"}}, format="json").json()["error"]["fields"] == {
        "jobs": ["Expected a list of jobs."]
    }
    assert api.post(BATCH, {}, format="json").json()["error"]["fields"] == {
        "jobs": ["This field is required: a list of jobs."]
    }
    unknown = api.post(BATCH, {"jobs": [job(1)], "dry_run": True}, format="json")
    assert unknown.json()["error"]["fields"] == {"dry_run": ["Unknown field."]}
    assert api.post(BATCH, [job(1)], format="json").status_code == 400
    assert JobDefinition.objects.count() == 0


def test_a_batch_that_would_exceed_the_jobs_quota_is_refused_whole(api, other_api, tenant, settings):
    settings.CHIME_QUOTA_MAX_JOBS = 5
    assert post(api, [job(k) for k in range(3)]).status_code == 201
    refused = post(api, [job(k) for k in range(3, 6)])
    assert refused.status_code == 403
    error = refused.json()["error"]
    assert error["code"] == "quota_exceeded"
    assert error["limit"] == {"name": "max_jobs", "value": 5}
    assert error["message"] == "This tenant has 3 jobs, its limit (max_jobs) is 5; 3 more would exceed it."
    assert JobDefinition.objects.filter(tenant=tenant).count() == 3, "none of the three was created"
    assert post(api, [job(k) for k in range(3, 5)]).status_code == 201, "two fit"
    assert post(other_api, [job(k) for k in range(5)]).status_code == 201, "another tenant has its own quota"
    TenantLimits.objects.create(tenant=tenant, max_jobs=7)
    assert post(api, [job(k) for k in range(2)]).status_code == 201, "the admin's override counts"


def test_the_same_key_and_body_replay_the_first_response_without_creating_again(api, tenant):
    jobs = [job(k) for k in range(3)]
    first = post(api, jobs, HTTP_IDEMPOTENCY_KEY="load-1")
    assert first.status_code == 201 and "Idempotent-Replayed" not in first.headers
    again = post(api, jobs, HTTP_IDEMPOTENCY_KEY="load-1")
    assert again.status_code == 201 and again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    assert JobDefinition.objects.filter(tenant=tenant).count() == 3
    other_body = post(api, jobs[:2], HTTP_IDEMPOTENCY_KEY="load-1")
    assert other_body.status_code == 409 and other_body.json()["error"]["code"] == "conflict"


def test_a_refused_batch_does_not_use_up_its_key(api, tenant):
    bad = [job(1), job(2, schedule={"type": "cron", "expression": "nope"})]
    assert post(api, bad, HTTP_IDEMPOTENCY_KEY="load-2").status_code == 400
    good = post(api, [job(1), job(2)], HTTP_IDEMPOTENCY_KEY="load-2")
    assert good.status_code == 201 and "Idempotent-Replayed" not in good.headers
    assert JobDefinition.objects.filter(tenant=tenant).count() == 2


def test_the_jobs_belong_to_the_caller_and_another_tenant_neither_sees_nor_replays_them(api, other_api, other_tenant):
    created = post(api, [job(1), job(2)], HTTP_IDEMPOTENCY_KEY="shared-key").json()["jobs"]
    for body in created:
        assert other_api.get(f"/api/v1/jobs/{body['id']}").status_code == 404
        assert other_api.delete(f"/api/v1/jobs/{body['id']}").status_code == 404
    assert other_api.get("/api/v1/jobs").json()["results"] == []
    theirs = post(other_api, [job(1), job(2)], HTTP_IDEMPOTENCY_KEY="shared-key")
    assert theirs.status_code == 201 and "Idempotent-Replayed" not in theirs.headers, "keys are per tenant"
    assert {j["id"] for j in theirs.json()["jobs"]}.isdisjoint({j["id"] for j in created})
    assert JobDefinition.objects.filter(tenant=other_tenant).count() == 2


def test_a_batch_counts_against_the_rate_limit_as_one_request_per_ten_jobs(api, settings):
    settings.CHIME_API_RATE_LIMIT = "30/min"
    settings.CHIME_QUOTA_MAX_JOBS = 10_000
    assert post(api, [job(k) for k in range(250)]).status_code == 201  # weighs 25
    throttled = post(api, [job(k) for k in range(51)])  # weighs 6: 25 + 6 > 30
    assert throttled.status_code == 429
    assert int(throttled.headers["Retry-After"]) >= 1
    assert throttled.json()["error"]["limit"]["name"] == "api_rate"
    # The refused request still counted as one (26), as any request the throttle refuses would.
    assert post(api, [job(k) for k in range(50)]).status_code == 429  # 26 + 5 > 30, counts one: 27
    assert post(api, [job(k) for k in range(30)]).status_code == 201  # 27 + 3 = 30: exactly fits
    assert api.get("/api/v1/jobs").status_code == 429, "the budget is the tenant's, shared with every request"


def test_a_batch_heavier_than_the_whole_rate_limit_is_a_400_saying_so(api, settings):
    settings.CHIME_API_RATE_LIMIT = "20/min"
    response = post(api, [job(k) for k in range(300)])  # weighs 30
    assert response.status_code == 400
    assert "smaller parts" in response.json()["error"]["message"]
    assert JobDefinition.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_the_created_jobs_fire_the_scheduler_materializes_them_and_the_worker_delivers_each(api, receiver):
    soon = timezone.now().isoformat()
    jobs = [
        {
            "name": f"now-{k}",
            "schedule": {"type": "once", "run_at": soon},
            "target": {"url": f"{receiver.url}/hook/{k}", "body": {"k": k}},
        }
        for k in range(5)
    ]
    created = post(api, jobs).json()["jobs"]
    materialize_due_runs(partitions=list(range(django_settings.CHIME_PARTITIONS)), now=timezone.now(), batch_size=100)
    runs = list(JobRun.objects.filter(definition_id__in=[j["id"] for j in created]))
    assert len(runs) == 5
    JobRun.objects.filter(id__in=[r.id for r in runs]).update(status=RunStatus.QUEUED)
    deliver_runs([str(r.id) for r in runs])
    received = receiver.received()
    assert sorted(json.loads(d.body)["k"] for d in received) == list(range(5))
    assert {d.headers["webhook-id"] for d in received} == {str(r.id) for r in runs}
    assert {r.status for r in JobRun.objects.filter(id__in=[r.id for r in runs])} == {RunStatus.SUCCEEDED}
    assert {j["status"] for j in api.get("/api/v1/jobs").json()["results"]} == {"completed"}
