"""Odd input gets a clear 400 on its field or a documented behaviour (issue #11): deep or large
bodies, a body on a GET, a `once` job far in the past, a backfill of a paused job, API key lists
and revoking the key that makes the request."""

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from apps.jobs.models import JobDefinition, JobRun
from apps.jobs.targets import MAX_BODY_BYTES, MAX_BODY_DEPTH
from apps.scheduler.services import materialize_due_runs
from apps.tenants.models import ApiKey
from apps.tenants.services import api_key_create

pytestmark = pytest.mark.django_db

JOB = {
    "name": "report",
    "schedule": {"type": "cron", "expression": "0 * * * *"},
    "target": {"url": "https://example.com/hook"},
}


def nested(depth: int):
    body = "leaf"
    for _ in range(depth):
        body = {"a": body}
    return body


def with_body(body, **target):
    return {**JOB, "target": {**JOB["target"], **target, "body": body}}


def test_a_body_nested_5000_deep_is_a_400_not_a_500(api):
    raw = '{"a":' * 5000 + "1" + "}" * 5000
    body = (
        f'{{"name": "deep", "schedule": {{"type": "once"}}, "target": {{"url": "https://x.example/", "body": {raw}}}}}'
    )
    response = api.generic("POST", "/api/v1/jobs", body, content_type="application/json")
    assert response.status_code == 400
    assert "nested too deeply" in response.json()["error"]["message"]
    assert not JobDefinition.objects.exists()


def test_a_body_nested_deeper_than_the_cap_is_refused_on_its_field(api):
    response = api.post("/api/v1/jobs", with_body(nested(MAX_BODY_DEPTH + 1)), format="json")
    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {"target.body": [f"Nested more than {MAX_BODY_DEPTH} levels deep."]}
    assert api.post("/api/v1/jobs", with_body(nested(MAX_BODY_DEPTH)), format="json").status_code == 201


def test_a_body_over_its_size_cap_is_refused_on_its_field(api):
    response = api.post("/api/v1/jobs", with_body({"x": "y" * MAX_BODY_BYTES}), format="json")
    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == ["target.body"]
    assert f"At most {MAX_BODY_BYTES} bytes" in response.json()["error"]["message"]


def test_a_get_job_with_a_body_is_refused_not_silently_dropped(api):
    response = api.post("/api/v1/jobs", with_body({"q": 1}, method="GET"), format="json")
    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == ["target.body"]
    assert api.post("/api/v1/jobs", with_body(None, method="GET"), format="json").status_code == 201
    posted = api.post("/api/v1/jobs", with_body({"q": 1}), format="json").json()
    moved = api.patch(
        f"/api/v1/jobs/{posted['id']}",
        {"target": {"url": "https://example.com/hook", "method": "GET", "body": {"q": 1}}},
        format="json",
    )
    assert moved.status_code == 400 and "target.body" in moved.json()["error"]["fields"]


def test_a_once_job_beyond_the_misfire_lookback_is_refused(api):
    years_ago = {**JOB, "schedule": {"type": "once", "run_at": "2019-01-01T00:00:00Z"}}
    response = api.post("/api/v1/jobs", years_ago, format="json")
    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == ["schedule.run_at"]
    assert "24 h in the past" in response.json()["error"]["message"]
    assert not JobDefinition.objects.exists()


def test_a_once_job_a_little_in_the_past_is_accepted_and_due_at_once(api):
    when = datetime.now(UTC) - timedelta(hours=1)
    response = api.post(
        "/api/v1/jobs", {**JOB, "schedule": {"type": "once", "run_at": when.isoformat()}}, format="json"
    )
    assert response.status_code == 201
    job = response.json()
    assert job["status"] == "active" and datetime.fromisoformat(job["next_fire_at"]) <= datetime.now(UTC)


def test_moving_a_once_job_beyond_the_lookback_by_patch_is_refused(api):
    job = api.post("/api/v1/jobs", {**JOB, "schedule": {"type": "once"}}, format="json").json()
    response = api.patch(
        f"/api/v1/jobs/{job['id']}", {"schedule": {"type": "once", "run_at": "2020-01-01T00:00:00Z"}}, format="json"
    )
    assert response.status_code == 400 and list(response.json()["error"]["fields"]) == ["schedule.run_at"]


def test_a_backfill_of_a_paused_job_is_refused_and_creates_nothing(api):
    job = api.post("/api/v1/jobs", {**JOB, "enabled": False}, format="json").json()
    end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    window = {"start": (end - timedelta(hours=3)).isoformat(), "end": end.isoformat()}
    response = api.post(f"/api/v1/jobs/{job['id']}/backfill", window, format="json")
    assert response.status_code == 409
    assert "paused: resume it first" in response.json()["error"]["message"]
    assert not JobRun.objects.exists()
    api.post(f"/api/v1/jobs/{job['id']}/resume")
    assert api.post(f"/api/v1/jobs/{job['id']}/backfill", window, format="json").json()["created"] == 3


def test_api_keys_are_listed_in_pages_like_every_list(api, tenant):
    for name in ("a", "b"):
        api_key_create(tenant=tenant, name=name)
    first = api.get("/api/v1/api-keys", {"limit": 2}).json()
    assert set(first) == {"results", "next"} and len(first["results"]) == 2 and first["next"]
    rest = api.get(first["next"]).json()
    assert len(rest["results"]) == 1 and rest["next"] is None
    assert [k["name"] for k in first["results"] + rest["results"]] == ["b", "a", ""]  # newest first


def test_a_key_cannot_revoke_itself(tenant):
    created = api_key_create(tenant=tenant, name="self")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {created.raw_key}")
    response = client.delete(f"/api/v1/api-keys/{created.api_key.id}")
    assert response.status_code == 409
    assert "cannot revoke itself" in response.json()["error"]["message"]
    assert ApiKey.objects.get(pk=created.api_key.pk).revoked_at is None
    assert client.get("/api/v1/jobs").status_code == 200

    other = api_key_create(tenant=tenant, name="other")
    assert client.delete(f"/api/v1/api-keys/{other.api_key.id}").status_code == 204
    assert ApiKey.objects.get(pk=other.api_key.pk).revoked_at is not None


def test_a_once_job_in_the_past_under_skip_is_recorded_skipped_and_never_ends_before_it_began(api, settings):
    """The documented outcome within the lookback: the scheduler records the missed instant as
    `skipped` with a reason, and the run's `finished_at` does not precede its `created_at`."""
    when = datetime.now(UTC) - timedelta(hours=2)
    job = api.post(
        "/api/v1/jobs",
        {**JOB, "schedule": {"type": "once", "run_at": when.isoformat()}, "misfire_policy": "skip"},
        format="json",
    ).json()
    materialize_due_runs(partitions=list(range(settings.CHIME_PARTITIONS)), now=timezone.now(), batch_size=100)
    (run,) = api.get(f"/api/v1/jobs/{job['id']}/runs").json()["results"]
    assert run["status"] == "skipped" and run["status_reason"]
    assert datetime.fromisoformat(run["finished_at"]) >= datetime.fromisoformat(run["created_at"])
    assert api.get(f"/api/v1/jobs/{job['id']}").json()["status"] == "completed"
