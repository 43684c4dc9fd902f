"""Header secrecy at the API (issue #10, deliverable 6; docs/api.md#header-secrecy): secret header
values are never returned, a PATCH that sends the placeholder back keeps the stored value, and the
worker still sends the real value while the stored attempt holds it redacted."""

import json

import pytest

from apps.delivery.services import deliver_runs
from apps.jobs.models import JobDefinition, JobRun, RunStatus
from apps.jobs.secrets import REDACTED

pytestmark = pytest.mark.django_db

SECRET = "Bearer s3cr3t-value-abcd"
JOB = {
    "name": "billing-sync",
    "schedule": {"type": "cron", "expression": "0 2 * * *", "timezone": "UTC"},
    "target": {
        "url": "https://example.com/hook",
        "headers": {"Authorization": SECRET, "X-Api-Key": "k-123456", "X-Custom": "hush-hush", "X-Team": "billing"},
        "secret_headers": ["x-custom"],
    },
}
SHOWN = {"Authorization": REDACTED, "X-Api-Key": REDACTED, "X-Custom": REDACTED, "X-Team": "billing"}
CLEAR = JOB["target"]["headers"]


def no_secret_in(response):
    text = response.content.decode()
    return not any(secret in text for secret in ("s3cr3t", "k-123456", "hush-hush"))


@pytest.fixture
def job(api):
    response = api.post("/api/v1/jobs", JOB, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def test_create_returns_secret_values_redacted_and_stores_them(api, job):
    assert job["target"]["headers"] == SHOWN
    assert job["target"]["secret_headers"] == ["X-Custom"], "names as the headers spell them"
    assert JobDefinition.objects.get(id=job["id"]).target_headers == CLEAR


def test_detail_and_list_never_return_a_secret_value(api, job):
    detail, listing = api.get(f"/api/v1/jobs/{job['id']}"), api.get("/api/v1/jobs")
    assert detail.json()["target"]["headers"] == SHOWN
    assert no_secret_in(detail) and no_secret_in(listing)


def test_a_patch_of_another_field_keeps_the_secret_values(api, job):
    response = api.patch(f"/api/v1/jobs/{job['id']}", {"name": "renamed"}, format="json")
    assert response.status_code == 200, response.json()
    assert JobDefinition.objects.get(id=job["id"]).target_headers == CLEAR


def test_a_patch_that_sends_the_placeholder_back_keeps_the_stored_value(api, job):
    target = {**job["target"], "headers": {**job["target"]["headers"], "X-Team": "ops", "X-Api-Key": "k-new"}}
    response = api.patch(f"/api/v1/jobs/{job['id']}", {"target": target}, format="json")
    assert response.status_code == 200, response.json()
    assert no_secret_in(response) and "k-new" not in response.content.decode()
    stored = JobDefinition.objects.get(id=job["id"]).target_headers
    assert stored == {**CLEAR, "X-Team": "ops", "X-Api-Key": "k-new"}


def test_the_placeholder_is_refused_where_nothing_is_stored(api):
    target = {**JOB["target"], "headers": {"Authorization": REDACTED}, "secret_headers": []}
    response = api.post("/api/v1/jobs", {**JOB, "target": target}, format="json")
    assert response.status_code == 400
    assert "no stored value" in response.json()["error"]["fields"]["target.headers"][0]


def test_moving_the_target_to_another_host_needs_the_secrets_again(api, job):
    target = {**job["target"], "url": "https://elsewhere.example/hook"}
    response = api.patch(f"/api/v1/jobs/{job['id']}", {"target": target}, format="json")
    assert response.status_code == 400
    assert "host changed" in response.json()["error"]["fields"]["target.headers"][0]
    assert JobDefinition.objects.get(id=job["id"]).target_url == "https://example.com/hook"
    target["headers"] = {**CLEAR, "Authorization": "Bearer other"}
    assert api.patch(f"/api/v1/jobs/{job['id']}", {"target": target}, format="json").status_code == 200


def test_a_secret_name_that_is_not_a_header_is_refused(api):
    target = {**JOB["target"], "secret_headers": ["X-Missing"]}
    response = api.post("/api/v1/jobs", {**JOB, "target": target}, format="json")
    assert response.status_code == 400
    assert "X-Missing" in response.json()["error"]["fields"]["target.secret_headers"][0]


@pytest.mark.django_db(transaction=True)
def test_the_worker_sends_the_real_value_and_the_attempt_stores_it_redacted(api, receiver):
    target = {**JOB["target"], "url": f"{receiver.url}/hook"}
    job = api.post("/api/v1/jobs", {**JOB, "target": target, "enabled": False}, format="json").json()
    response = api.post(f"/api/v1/jobs/{job['id']}/trigger", format="json")
    assert response.status_code in (200, 201, 202), response.content
    run = JobRun.objects.get(definition_id=job["id"])
    JobRun.objects.filter(id=run.id).update(status=RunStatus.QUEUED)
    deliver_runs([str(run.id)])
    (delivery,) = receiver.received()
    assert delivery.headers["authorization"] == SECRET and delivery.headers["x-custom"] == "hush-hush"
    attempt = run.attempts.get()
    assert {name: attempt.request_headers[name] for name in SHOWN} == SHOWN
    detail = api.get(f"/api/v1/runs/{run.id}")
    assert detail.status_code == 200
    assert no_secret_in(detail)
    assert json.loads(detail.content)["attempts"][0]["request_headers"]["Authorization"] == REDACTED
