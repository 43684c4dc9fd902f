"""POST/GET /api/v1/jobs: the v1 contract, validation errors naming the field, tenant isolation."""

from datetime import UTC, datetime

import pytest

from apps.jobs.models import JobDefinition, JobRun, RunAttempt, RunStatus

pytestmark = pytest.mark.django_db

CRON_JOB = {
    "name": "nightly-report",
    "schedule": {"type": "cron", "expression": "0 2 * * *", "timezone": "Europe/Berlin"},
    "target": {
        "url": "https://example.com/hook",
        "method": "POST",
        "headers": {"X-Team": "billing"},
        "body": {"any": "json"},
    },
    "priority": "high",
    "timeout_seconds": 30,
    "retry": {"max_attempts": 5, "initial_backoff_seconds": 10, "max_backoff_seconds": 3600},
    "enabled": True,
}


def with_changes(base: dict, **changes) -> dict:
    data = {**base}
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        node = data
        for name in parents:
            node[name] = dict(node[name])
            node = node[name]
        node[leaf] = value
    return data


def test_it_creates_a_cron_job_and_returns_the_contract(api):
    response = api.post("/api/v1/jobs", CRON_JOB, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["status"] == "active"
    assert body["name"] == "nightly-report"
    assert body["schedule"] == {**CRON_JOB["schedule"], "run_at": None}
    assert body["target"] == {**CRON_JOB["target"], "secret_headers": []}
    assert body["priority"] == "high"
    assert body["retry"] == CRON_JOB["retry"]
    assert body["enabled"] is True
    assert body["created_at"].endswith("Z")
    # 02:00 in Berlin is 01:00 UTC in winter (CET, +01:00).
    next_fire = datetime.fromisoformat(body["next_fire_at"])
    assert body["next_fire_at"].endswith("Z")
    assert (next_fire.hour, next_fire.minute) == (1, 0)
    assert JobDefinition.objects.get(pk=body["id"]).tenant.slug == "acme"


def test_it_applies_defaults(api):
    response = api.post(
        "/api/v1/jobs",
        {
            "name": "ping",
            "schedule": {"type": "cron", "expression": "*/5 * * * *"},
            "target": {"url": "https://example.com/ping"},
        },
        format="json",
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["priority"] == "default"
    assert body["timeout_seconds"] == 30
    assert body["retry"] == {"max_attempts": 5, "initial_backoff_seconds": 10, "max_backoff_seconds": 3600}
    assert body["schedule"]["timezone"] == "UTC"
    assert body["target"]["method"] == "POST"
    assert body["target"]["body"] is None


def test_a_once_job_without_run_at_is_due_now(api):
    before = datetime.now(UTC)
    response = api.post(
        "/api/v1/jobs",
        {"name": "now", "schedule": {"type": "once"}, "target": {"url": "https://example.com/x"}},
        format="json",
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    next_fire = datetime.fromisoformat(body["next_fire_at"])
    assert before <= next_fire <= datetime.now(UTC)
    assert body["schedule"]["run_at"] == body["next_fire_at"]


def test_a_once_job_keeps_its_instant(api):
    response = api.post(
        "/api/v1/jobs",
        {
            "name": "later",
            "schedule": {"type": "once", "run_at": "2030-12-01T11:00:00+01:00"},
            "target": {"url": "https://example.com/x"},
        },
        format="json",
    )
    assert response.status_code == 201
    assert response.json()["next_fire_at"] == "2030-12-01T10:00:00Z"


def test_a_paused_job_is_created_disabled(api):
    response = api.post("/api/v1/jobs", {**CRON_JOB, "enabled": False}, format="json")
    assert response.status_code == 201
    assert response.json()["status"] == "paused"
    assert response.json()["enabled"] is False


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"schedule__expression": "not a cron"}, "schedule.expression"),
        ({"schedule__expression": "61 * * * *"}, "schedule.expression"),
        ({"schedule__expression": "0 0 30 2 *"}, "schedule.expression"),
        ({"schedule__timezone": "Mars/Olympus"}, "schedule.timezone"),
        ({"schedule__type": "sometimes"}, "schedule.type"),
        ({"target__url": "ftp://example.com/x"}, "target.url"),
        ({"target__url": "not a url"}, "target.url"),
        ({"target__method": "BREW"}, "target.method"),
        ({"target__headers": {"webhook-id": "mine"}}, "target.headers"),
        ({"priority": "urgent"}, "priority"),
        ({"timeout_seconds": 0}, "timeout_seconds"),
        ({"timeout_seconds": 100000}, "timeout_seconds"),
        ({"retry__max_attempts": 0}, "retry.max_attempts"),
        ({"retry__max_backoff_seconds": 1}, "retry.max_backoff_seconds"),
        ({"name": ""}, "name"),
        ({"surprise": True}, "surprise"),
        ({"target__surprise": True}, "target.surprise"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(api, changes, field):
    response = api.post("/api/v1/jobs", with_changes(CRON_JOB, **changes), format="json")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid"
    assert field in error["fields"], error
    assert error["fields"][field][0]
    assert not JobDefinition.objects.exists()


def test_a_naive_run_at_is_refused_not_guessed(api):
    response = api.post(
        "/api/v1/jobs",
        {
            "name": "x",
            "schedule": {"type": "once", "run_at": "2030-12-01T10:00:00"},
            "target": {"url": "https://example.com/x"},
        },
        format="json",
    )
    assert response.status_code == 400
    assert "schedule.run_at" in response.json()["error"]["fields"]


def test_a_private_target_is_refused_by_default(api, settings):
    settings.WEBHOOK_ALLOW_PRIVATE_NETWORKS = False
    response = api.post("/api/v1/jobs", with_changes(CRON_JOB, target__url="http://10.0.0.1/hook"), format="json")
    assert response.status_code == 400
    assert "target.url" in response.json()["error"]["fields"]


def test_it_needs_an_api_key(client, tenant):
    response = client.get("/api/v1/jobs")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"


def test_a_wrong_key_is_401(client, tenant):
    response = client.get("/api/v1/jobs", HTTP_AUTHORIZATION="Bearer chime_nope_nope")
    assert response.status_code == 401


def test_a_revoked_key_is_401(tenant):
    from rest_framework.test import APIClient

    from apps.tenants.services import api_key_create, api_key_revoke

    created = api_key_create(tenant=tenant)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {created.raw_key}")
    assert client.get("/api/v1/jobs").status_code == 200
    api_key_revoke(api_key=created.api_key)
    assert client.get("/api/v1/jobs").status_code == 401


def test_only_a_hash_of_the_key_is_stored(tenant):
    from apps.tenants.models import ApiKey
    from apps.tenants.services import api_key_create

    created = api_key_create(tenant=tenant)
    stored = ApiKey.objects.get(pk=created.api_key.pk)
    assert created.raw_key.startswith(stored.prefix)
    assert created.raw_key not in {stored.key_hash, stored.prefix, stored.name}
    assert len(stored.key_hash) == 64


def test_list_and_detail_show_only_the_tenants_jobs(api, other_api):
    mine = api.post("/api/v1/jobs", CRON_JOB, format="json").json()
    theirs = other_api.post("/api/v1/jobs", {**CRON_JOB, "name": "theirs"}, format="json").json()

    listed = api.get("/api/v1/jobs").json()["results"]
    assert [job["id"] for job in listed] == [mine["id"]]

    assert api.get(f"/api/v1/jobs/{mine['id']}").status_code == 200
    assert api.get(f"/api/v1/jobs/{theirs['id']}").status_code == 404
    assert other_api.get(f"/api/v1/jobs/{mine['id']}").status_code == 404


def test_job_detail_has_recent_runs_newest_first(api, tenant):
    job = JobDefinition.objects.get(pk=api.post("/api/v1/jobs", CRON_JOB, format="json").json()["id"])
    for day in (1, 2, 3):
        when = datetime(2026, 11, day, 1, tzinfo=UTC)
        JobRun.objects.create(
            tenant=tenant, definition=job, partition=job.partition, scheduled_for=when, available_at=when
        )
    runs = api.get(f"/api/v1/jobs/{job.id}").json()["recent_runs"]
    assert [run["scheduled_for"] for run in runs] == [
        "2026-11-03T01:00:00Z",
        "2026-11-02T01:00:00Z",
        "2026-11-01T01:00:00Z",
    ]
    assert set(runs[0]) >= {
        "id",
        "job_id",
        "status",
        "trigger",
        "scheduled_for",
        "attempt_count",
        "created_at",
        "finished_at",
    }


def test_run_detail_has_attempts_and_is_tenant_scoped(api, other_api, tenant):
    job = JobDefinition.objects.get(pk=api.post("/api/v1/jobs", CRON_JOB, format="json").json()["id"])
    when = datetime(2026, 11, 1, 1, tzinfo=UTC)
    run = JobRun.objects.create(
        tenant=tenant,
        definition=job,
        partition=job.partition,
        scheduled_for=when,
        available_at=when,
        status=RunStatus.SUCCEEDED,
        attempt_count=1,
    )
    RunAttempt.objects.create(run=run, number=1, started_at=when, finished_at=when, status_code=200, duration_ms=12)

    body = api.get(f"/api/v1/runs/{run.id}").json()
    assert body["id"] == str(run.id)
    assert body["job_id"] == str(job.id)
    assert body["attempts"] == [
        {
            "number": 1,
            "started_at": "2026-11-01T01:00:00Z",
            "finished_at": "2026-11-01T01:00:00Z",
            "status_code": 200,
            "error": "",
            "error_kind": "",
            "duration_ms": 12,
            "response_excerpt": "",
            "request_headers": {},
        }
    ]
    assert other_api.get(f"/api/v1/runs/{run.id}").status_code == 404


def test_signing_secret_is_the_tenants(api, other_api, tenant):
    from apps.tenants.selectors import signing_secret_current

    secret = api.get("/api/v1/signing-secret").json()["secret"]
    assert secret == signing_secret_current(tenant=tenant).secret
    assert secret.startswith("whsec_")
    assert other_api.get("/api/v1/signing-secret").json()["secret"] != secret
