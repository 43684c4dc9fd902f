"""API v1 behaviour: PATCH, listing and filters, API keys, idempotent creates, limits, errors."""

from datetime import UTC, datetime, timedelta

import pytest
from django.core.cache import cache
from rest_framework.test import APIClient

from apps.jobs.models import JobDefinition, JobRun, RunStatus

pytestmark = pytest.mark.django_db

JOB = {
    "name": "report",
    "schedule": {"type": "cron", "expression": "0 2 * * *", "timezone": "Europe/Berlin"},
    "target": {"url": "https://example.com/hook"},
}


@pytest.fixture
def job(api):
    return api.post("/api/v1/jobs", JOB, format="json").json()


def test_patch_changes_only_what_is_given(api, job):
    response = api.patch(f"/api/v1/jobs/{job['id']}", {"name": "renamed", "priority": "low"}, format="json")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert (body["name"], body["priority"]) == ("renamed", "low")
    assert body["schedule"] == job["schedule"] and body["target"] == job["target"]
    assert body["next_fire_at"] == job["next_fire_at"]


def test_patching_the_schedule_recomputes_next_fire_and_cancels_old_runs(api, job, tenant):
    definition = JobDefinition.objects.get(pk=job["id"])
    when = datetime.fromisoformat(job["next_fire_at"])
    old = JobRun.objects.create(
        tenant=tenant, definition=definition, partition=definition.partition, scheduled_for=when, available_at=when
    )
    response = api.patch(
        f"/api/v1/jobs/{job['id']}",
        {"schedule": {"type": "cron", "expression": "*/5 * * * *", "timezone": "UTC"}},
        format="json",
    )
    assert response.status_code == 200, response.json()
    next_fire = datetime.fromisoformat(response.json()["next_fire_at"])
    assert next_fire.minute % 5 == 0 and next_fire - datetime.now(UTC) <= timedelta(minutes=5)
    old.refresh_from_db()
    assert (old.status, old.status_reason) == (RunStatus.CANCELLED, "The job's schedule changed.")


def test_patch_validates_like_create(api, job):
    response = api.patch(
        f"/api/v1/jobs/{job['id']}", {"schedule": {"type": "cron", "expression": "99 * * * *"}}, format="json"
    )
    assert response.status_code == 400
    assert "schedule.expression" in response.json()["error"]["fields"]
    assert api.patch(f"/api/v1/jobs/{job['id']}", {"bogus": 1}, format="json").status_code == 400
    assert JobDefinition.objects.get(pk=job["id"]).cron_expression == "0 2 * * *"


def test_patch_enabled_pauses_and_resumes(api, job):
    assert api.patch(f"/api/v1/jobs/{job['id']}", {"enabled": False}, format="json").json()["status"] == "paused"
    assert api.patch(f"/api/v1/jobs/{job['id']}", {"enabled": True}, format="json").json()["status"] == "active"


def test_list_filters_and_cursor_pagination(api):
    for i in range(5):
        api.post("/api/v1/jobs", {**JOB, "name": f"alpha-{i}", "priority": "high" if i % 2 else "low"}, format="json")
    api.post("/api/v1/jobs", {**JOB, "name": "beta", "enabled": False}, format="json")

    assert [j["name"] for j in api.get("/api/v1/jobs?q=BETA").json()["results"]] == ["beta"]
    assert {j["name"] for j in api.get("/api/v1/jobs?status=paused").json()["results"]} == {"beta"}
    assert len(api.get("/api/v1/jobs?priority=high").json()["results"]) == 2

    page = api.get("/api/v1/jobs?limit=4").json()
    assert len(page["results"]) == 4 and page["next"]
    rest = api.get(page["next"]).json()
    assert len(rest["results"]) == 2 and rest["next"] is None
    names = [j["name"] for j in page["results"] + rest["results"]]
    assert names == ["beta", "alpha-4", "alpha-3", "alpha-2", "alpha-1", "alpha-0"]  # newest first
    assert api.get("/api/v1/jobs?status=weird").status_code == 400


def test_runs_filters(api, job, tenant):
    definition = JobDefinition.objects.get(pk=job["id"])
    base = datetime(2026, 6, 1, tzinfo=UTC)
    for day, status in enumerate(["succeeded", "failed", "failed"]):
        when = base + timedelta(days=day)
        JobRun.objects.create(
            tenant=tenant,
            definition=definition,
            partition=definition.partition,
            scheduled_for=when,
            available_at=when,
            status=status,
        )
    failed = api.get("/api/v1/runs?status=failed").json()["results"]
    assert len(failed) == 2
    after = api.get("/api/v1/runs", {"scheduled_after": "2026-06-02T00:00:00Z"}).json()["results"]
    assert len(after) == 2
    before = api.get("/api/v1/runs", {"scheduled_before": "2026-06-02T00:00:00Z", "job": job["id"]}).json()
    assert [r["status"] for r in before["results"]] == ["succeeded"]
    assert api.get("/api/v1/runs?status=nope").status_code == 400
    assert api.get("/api/v1/runs?scheduled_after=yesterday").status_code == 400


def test_replay_many_replays_the_failed_runs_matching_the_filter(api, job, tenant):
    definition = JobDefinition.objects.get(pk=job["id"])
    when = datetime(2026, 6, 1, tzinfo=UTC)
    failed = [
        JobRun.objects.create(
            tenant=tenant,
            definition=definition,
            partition=definition.partition,
            scheduled_for=when + timedelta(hours=h),
            available_at=when,
            status="failed",
            attempt_count=5,
        )
        for h in range(3)
    ]
    response = api.post("/api/v1/runs/replay", {"job": job["id"]}, format="json")
    assert (response.status_code, response.json()) == (202, {"replayed": 3})
    for run in failed:
        run.refresh_from_db()
        assert (run.status, run.attempts_before_replay) == (RunStatus.SCHEDULED, 5)


def test_cancel_and_replay_refuse_runs_in_the_wrong_state(api, job, tenant):
    definition = JobDefinition.objects.get(pk=job["id"])
    when = datetime(2026, 6, 1, tzinfo=UTC)
    done = JobRun.objects.create(
        tenant=tenant,
        definition=definition,
        partition=definition.partition,
        scheduled_for=when,
        available_at=when,
        status="succeeded",
    )
    assert api.post(f"/api/v1/runs/{done.id}/cancel").status_code == 409
    response = api.post(f"/api/v1/runs/{done.id}/replay")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "conflict"


def test_api_keys_are_shown_once_listed_by_prefix_and_revoked_at_once(api):
    created = api.post("/api/v1/api-keys", {"name": "ci"}, format="json")
    assert created.status_code == 201
    raw = created.json()["key"]
    listed = api.get("/api/v1/api-keys").json()
    entry = next(k for k in listed if k["id"] == created.json()["id"])
    assert "key" not in entry and raw.startswith(entry["prefix"]) and entry["name"] == "ci"

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert client.get("/api/v1/jobs").status_code == 200
    assert api.delete(f"/api/v1/api-keys/{entry['id']}").status_code == 204
    assert client.get("/api/v1/jobs").status_code == 401
    assert next(k for k in api.get("/api/v1/api-keys").json() if k["id"] == entry["id"])["revoked_at"]


def test_the_same_idempotency_key_and_body_return_the_first_response(api):
    first = api.post("/api/v1/jobs", JOB, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    again = api.post("/api/v1/jobs", JOB, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert (first.status_code, again.status_code) == (201, 201)
    assert again.json() == first.json()
    assert again.headers["Idempotent-Replayed"] == "true"
    assert JobDefinition.objects.count() == 1


def test_the_same_idempotency_key_with_another_body_is_409(api):
    api.post("/api/v1/jobs", JOB, format="json", HTTP_IDEMPOTENCY_KEY="k-2")
    response = api.post("/api/v1/jobs", {**JOB, "name": "other"}, format="json", HTTP_IDEMPOTENCY_KEY="k-2")
    assert response.status_code == 409
    assert JobDefinition.objects.count() == 1


def test_an_invalid_request_does_not_use_up_its_idempotency_key(api):
    assert api.post("/api/v1/jobs", {**JOB, "name": ""}, format="json", HTTP_IDEMPOTENCY_KEY="k-3").status_code == 400
    assert api.post("/api/v1/jobs", JOB, format="json", HTTP_IDEMPOTENCY_KEY="k-3").status_code == 201


def test_idempotency_keys_are_per_tenant(api, other_api):
    api.post("/api/v1/jobs", JOB, format="json", HTTP_IDEMPOTENCY_KEY="shared")
    theirs = other_api.post("/api/v1/jobs", JOB, format="json", HTTP_IDEMPOTENCY_KEY="shared")
    assert theirs.status_code == 201 and "Idempotent-Replayed" not in theirs.headers
    assert JobDefinition.objects.count() == 2


def test_a_body_over_the_limit_is_413(api, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    response = api.post(
        "/api/v1/jobs", {**JOB, "target": {**JOB["target"], "body": {"x": "y" * 20_000}}}, format="json"
    )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "too_large"


def test_rate_limit_is_per_tenant_with_retry_after(api, other_api, settings):
    cache.clear()
    settings.CHIME_API_RATE_LIMIT = "3/min"
    assert [api.get("/api/v1/jobs").status_code for _ in range(3)] == [200, 200, 200]
    limited = api.get("/api/v1/jobs")
    assert limited.status_code == 429
    assert int(limited.headers["Retry-After"]) > 0
    assert limited.json()["error"]["code"] == "throttled"
    assert other_api.get("/api/v1/jobs").status_code == 200, "another tenant has its own budget"
    cache.clear()


def test_malformed_json_is_a_400(api):
    response = api.generic("POST", "/api/v1/jobs", "{not json", content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "parse_error"


def test_schema_and_docs_are_served(client):
    schema = client.get("/api/v1/schema", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    assert "/api/v1/jobs" in paths and "/api/v1/runs/{id}/replay" in paths
    assert client.get("/api/v1/docs").status_code == 200
