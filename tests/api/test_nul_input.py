"""Input holding NUL (U+0000), which PostgreSQL cannot store in text or jsonb, is a 400 naming the
field, never a 500 (issue #10, deliverable 2); the rule lives in apps/jobs/targets.py."""

import pytest

from apps.jobs.models import JobDefinition

from .test_jobs import CRON_JOB, with_changes

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("changes", "path"),
    [
        ({"name": "night\x00ly"}, "name"),
        ({"schedule__expression": "0 2 * * *\x00"}, "schedule.expression"),
        ({"schedule__timezone": "Europe/Berlin\x00"}, "schedule.timezone"),
        ({"target__url": "https://example.com/\x00hook"}, "target.url"),
        ({"target__headers": {"X-Team": "bill\x00ing"}}, "target.headers"),
        ({"target__headers": {"X-\x00Team": "billing"}}, "target.headers"),
        ({"target__body": {"text": "ok\x00"}}, "target.body"),
        ({"target__body": {"items": [1, {"ke\x00y": 2}]}}, "target.body"),
        ({"target__body": "\x00"}, "target.body"),
    ],
)
def test_nul_anywhere_in_a_job_is_a_400_naming_the_field(api, changes, path):
    response = api.post("/api/v1/jobs", with_changes(CRON_JOB, **changes), format="json")
    assert response.status_code == 400, response.content
    fields = response.json()["error"]["fields"]
    messages = [m for name, ms in fields.items() if name == path or name.startswith(f"{path}.") for m in ms]
    assert "null" in " ".join(messages).lower(), fields
    assert not JobDefinition.objects.exists()


def test_the_body_error_says_where_the_nul_is(api):
    response = api.post("/api/v1/jobs", with_changes(CRON_JOB, target__body={"a": [0, "x\x00"]}), format="json")
    assert response.json()["error"]["fields"]["target.body"] == ["Null characters (\\u0000) are not allowed (at a[1])."]


def test_a_patch_with_nul_is_a_400_and_changes_nothing(api):
    job = api.post("/api/v1/jobs", CRON_JOB, format="json").json()
    target = {**CRON_JOB["target"], "body": {"note": "\x00"}}
    response = api.patch(f"/api/v1/jobs/{job['id']}", {"target": target}, format="json")
    assert response.status_code == 400
    assert "target.body" in response.json()["error"]["fields"]
    assert JobDefinition.objects.get(id=job["id"]).target_body == {"any": "json"}


def test_a_search_with_nul_is_a_400(api):
    response = api.get("/api/v1/jobs?q=%00")
    assert response.status_code == 400
    assert response.json()["error"]["fields"]["q"] == ["Null characters are not allowed."]
