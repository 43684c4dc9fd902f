"""Jobs pages: list (schedule in words, next fire in two zones, last run), filters, HTMX actions,
the form (every API field, inline errors, live preview), detail with chart and runs."""

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
import time_machine

from apps.jobs import services
from apps.jobs.models import JobDefinition, JobRun, JobStatus, RunStatus

from .conftest import JOB_FIELDS, make_run

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}
VALID = {
    "name": "nightly-export",
    "schedule_type": "cron",
    "cron_expression": "30 2 * * *",
    "timezone": "Europe/Berlin",
    "run_at": "",
    "dst_gap": "skip",
    "dst_overlap": "both",
    "target_url": "https://example.com/export",
    "target_method": "PUT",
    "target_headers": "X-Team: data\nAuthorization: Bearer abc",
    "target_body": '{"kind": "export", "full": true}',
    "priority": "high",
    "timeout_seconds": "45",
    "retry_max_attempts": "3",
    "retry_initial_backoff_seconds": "5",
    "retry_max_backoff_seconds": "600",
    "misfire_policy": "coalesce",
    "catch_up_limit": "7",
    "jitter_seconds": "30",
    "concurrency_policy": "forbid",
    "failure_threshold": "4",
    "enabled": "on",
}


def test_list_shows_schedule_in_words_next_fire_in_both_zones_and_last_run(owner_client, job):
    make_run(job, status=RunStatus.FAILED, error="HTTP 500")
    client = owner_client
    client.cookies["chime_tz"] = "America/New_York"
    html = client.get("/jobs/").content.decode()
    assert "at 02:00 every day, Europe/Berlin" in html
    local = job.next_fire_at.astimezone(ZoneInfo("Europe/Berlin"))
    viewer = job.next_fire_at.astimezone(ZoneInfo("America/New_York"))
    assert local.strftime("%Y-%m-%d %H:%M:%S") in html and viewer.strftime("%Y-%m-%d %H:%M:%S") in html
    utc = job.next_fire_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
    assert f'title="{utc} UTC"' in html  # the UTC value on hover
    assert "status-failed" in html


def test_list_filters_by_name_and_status_and_answers_htmx_with_the_table(owner_client, tenant, job):
    services.job_create(tenant=tenant, name="paused-one", enabled=False, **JOB_FIELDS)
    html = owner_client.get("/jobs/?q=nightly").content.decode()
    assert "nightly-report" in html and "paused-one" not in html
    html = owner_client.get("/jobs/?status=paused").content.decode()
    assert "paused-one" in html and "nightly-report" not in html
    partial = owner_client.get("/jobs/?q=paused", HTTP_HX_TARGET="job-table", **HTMX).content.decode()
    assert partial.lstrip().startswith('<div id="job-table"') and "<html" not in partial


def test_pause_resume_and_trigger_by_htmx_return_the_row(owner_client, job):
    row = owner_client.post(f"/jobs/{job.id}/pause/", **HTMX).content.decode()
    assert row.lstrip().startswith(f'<tr id="job-{job.id}"') and "Paused." in row and "Resume" in row
    job.refresh_from_db()
    assert job.status == JobStatus.PAUSED
    row = owner_client.post(f"/jobs/{job.id}/resume/", **HTMX).content.decode()
    assert "Resumed." in row and "Pause" in row
    row = owner_client.post(f"/jobs/{job.id}/trigger/", **HTMX).content.decode()
    assert "Triggered" in row and "status-scheduled" in row
    assert JobRun.objects.get(definition=job).trigger == "manual"


def test_actions_without_javascript_redirect_back(owner_client, job):
    response = owner_client.post(f"/jobs/{job.id}/pause/", {"next": "/jobs/"})
    assert response.status_code == 302 and response["Location"] == "/jobs/"
    response = owner_client.post(f"/jobs/{job.id}/pause/", {"next": "https://evil.example/"})
    assert response["Location"] == f"/jobs/{job.id}/"  # no open redirect
    response = owner_client.post(f"/jobs/{job.id}/pause/")
    assert response.status_code == 302  # pausing twice is fine


def test_a_conflicting_action_is_explained_in_the_row(owner_client, tenant):
    once = services.job_create(tenant=tenant, name="done", schedule_type="once", target_url="http://127.0.0.1:9/x")
    JobDefinition.objects.filter(pk=once.pk).update(status=JobStatus.COMPLETED)
    row = owner_client.post(f"/jobs/{once.id}/pause/", **HTMX).content.decode()
    assert "cannot be paused" in row


def test_trigger_on_the_job_page_returns_the_new_run_for_the_top_of_its_runs(owner_client, job):
    html = owner_client.post(f"/jobs/{job.id}/trigger/", HTTP_HX_TARGET="job-runs-head", **HTMX).content.decode()
    run = JobRun.objects.get(definition=job)
    assert html.lstrip().startswith(f'<tbody id="run-{run.id}"')


def test_create_through_the_form_with_every_field(owner_client, tenant):
    response = owner_client.post("/jobs/new/", VALID)
    job = JobDefinition.objects.get(tenant=tenant, name="nightly-export")
    assert response.status_code == 302 and response["Location"] == f"/jobs/{job.id}/"
    assert (job.cron_expression, job.timezone, job.dst_gap, job.dst_overlap) == (
        "30 2 * * *",
        "Europe/Berlin",
        "skip",
        "both",
    )
    assert job.target_method == "PUT"
    assert job.target_headers == {"X-Team": "data", "Authorization": "Bearer abc"}
    assert job.target_body == {"kind": "export", "full": True}
    assert (job.priority, job.timeout_seconds) == ("high", 45)
    assert (job.retry_max_attempts, job.retry_initial_backoff_seconds, job.retry_max_backoff_seconds) == (3, 5, 600)
    assert (job.misfire_policy, job.catch_up_limit, job.jitter_seconds) == ("coalesce", 7, 30)
    assert (job.concurrency_policy, job.failure_threshold) == ("forbid", 4)
    assert job.status == JobStatus.ACTIVE and job.next_fire_at is not None


def test_create_a_once_job_at_a_wall_time_in_its_zone(owner_client, tenant):
    data = {**VALID, "schedule_type": "once", "cron_expression": "ignored for once", "run_at": "2030-07-01T09:30"}
    data.pop("enabled")
    assert owner_client.post("/jobs/new/", data).status_code == 302
    job = JobDefinition.objects.get(tenant=tenant, name="nightly-export")
    assert job.cron_expression == ""
    assert job.run_at == datetime(2030, 7, 1, 7, 30, tzinfo=UTC)  # 09:30 CEST
    assert job.status == JobStatus.PAUSED  # "enabled" unchecked


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"cron_expression": "61 * * * *"}, "cron_expression", "out of range"),
        ({"cron_expression": ""}, "cron_expression", "needs an expression"),
        ({"timezone": "Mars/Olympus"}, "timezone", "Unknown time zone"),
        ({"target_url": "ftp://example.com"}, "target_url", ""),
        ({"target_headers": "webhook-id: x"}, "target_headers", "set by Chime"),
        ({"target_headers": "no colon"}, "target_headers", "Name: value"),
        ({"target_body": "{not json"}, "target_body", "Not valid JSON"),
        ({"retry_max_backoff_seconds": "1"}, "retry_max_backoff_seconds", "at least"),
        ({"timeout_seconds": "100000"}, "timeout_seconds", ""),
        ({"run_at": "tomorrow", "schedule_type": "once"}, "run_at", "date and time"),
    ],
)
def test_invalid_input_shows_the_error_next_to_its_field(owner_client, tenant, changes, field, message):
    response = owner_client.post("/jobs/new/", {**VALID, **changes})
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert field in errors and message in " ".join(errors[field])
    html = response.content.decode()
    assert f'id="id_{field}_error"' in html  # rendered inside the field's block
    assert not JobDefinition.objects.filter(tenant=tenant).exists()


def test_form_labels_every_field(owner_client):
    html = owner_client.get("/jobs/new/").content.decode()
    assert '<option value="Europe/Berlin">' in html  # the time zone input's suggestions
    from apps.dashboard.forms.jobs import JobForm

    for name, field in JobForm.base_fields.items():
        if name == "schedule_type":
            assert "<legend>Schedule type</legend>" in html
        else:
            assert f'<label for="id_{name}">{field.label}</label>' in html, name


@time_machine.travel(datetime(2026, 3, 25, 12, 0, tzinfo=UTC), tick=False)
def test_preview_lists_the_next_five_fire_times_with_dst_flagged(owner_client):
    params = {"cron_expression": "30 2 * * *", "timezone": "Europe/Berlin", "dst_gap": "shift", "dst_overlap": "first"}
    response = owner_client.get("/jobs/preview/", params, **HTMX)
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="schedule-preview"')
    assert html.count("<li") == 5
    # 2026-03-29 02:30 does not exist in Berlin: shifted to 03:00 CEST and flagged.
    assert "2026-03-29 03:00:00 CEST" in html and "DST gap" in html
    assert "2026-03-26 02:30:00 CET" in html


def test_preview_shows_an_invalid_expression_as_an_error(owner_client):
    html = owner_client.get("/jobs/preview/", {"cron_expression": "* * *", "timezone": "UTC"}, **HTMX).content.decode()
    assert 'role="alert"' in html and "exactly 5 fields" in html
    html = owner_client.get(
        "/jobs/preview/", {"cron_expression": "* * * * *", "timezone": "Nope/Nope"}
    ).content.decode()
    assert "Time zone: Unknown time zone" in html


def test_the_form_page_renders_the_preview_of_what_was_posted(owner_client):
    html = owner_client.post("/jobs/new/", {**VALID, "name": ""}).content.decode()
    assert "Next 5 fire times" in html


def test_edit_form_is_filled_with_the_job(owner_client, job):
    html = owner_client.get(f"/jobs/{job.id}/edit/").content.decode()
    assert 'value="nightly-report"' in html and 'value="0 2 * * *"' in html and 'value="Europe/Berlin"' in html


@pytest.mark.xfail(
    not hasattr(services, "job_update"),
    reason="needs apps.jobs.services.job_update (PATCH /jobs/{id}), being added by the lead",
    strict=False,
)
def test_edit_saves_through_job_update(owner_client, job):
    response = owner_client.post(f"/jobs/{job.id}/edit/", {**VALID, "name": "renamed", "cron_expression": "0 3 * * *"})
    assert response.status_code == 302
    job.refresh_from_db()
    assert (job.name, job.cron_expression, job.target_method) == ("renamed", "0 3 * * *", "PUT")


def test_detail_shows_definition_chart_and_runs(owner_client, job, failed_run):
    make_run(job, minutes_ago=1)
    html = owner_client.get(f"/jobs/{job.id}/").content.decode()
    assert "at 02:00 every day, Europe/Berlin" in html
    assert "<svg" in html and "bar-failed" in html and "bar-succeeded" in html
    assert f'id="run-{failed_run.id}"' in html
    assert "Attempts" in html


def test_delete_asks_then_stops_the_job_and_keeps_history(owner_client, job, failed_run):
    assert "Delete the job" in owner_client.get(f"/jobs/{job.id}/delete/").content.decode()
    assert owner_client.post(f"/jobs/{job.id}/delete/").status_code == 302
    job.refresh_from_db()
    assert job.status == JobStatus.DELETED
    assert JobRun.objects.filter(pk=failed_run.pk).exists()
    assert owner_client.get(f"/jobs/{job.id}/").status_code == 404
