"""Runs: list with filters, run detail and attempts, replay one, dead letters and bulk replay."""

from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone

from apps.jobs.models import RunStatus

from .conftest import make_run

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


def test_list_filters_by_status_job_and_scheduled_time(owner_client, tenant, job, failed_run):
    ok = make_run(job, minutes_ago=120)
    html = owner_client.get("/runs/").content.decode()
    assert f"run-{ok.id}" in html and f"run-{failed_run.id}" in html
    html = owner_client.get("/runs/?status=failed").content.decode()
    assert f"run-{ok.id}" not in html and f"run-{failed_run.id}" in html
    owner_client.cookies["chime_tz"] = "Asia/Tokyo"  # filter times are read in the viewer's zone
    after_tokyo = (timezone.now() - timedelta(minutes=30)).astimezone(ZoneInfo("Asia/Tokyo")).strftime("%Y-%m-%dT%H:%M")
    html = owner_client.get(f"/runs/?scheduled_after={after_tokyo}").content.decode()
    assert f"run-{ok.id}" not in html and f"run-{failed_run.id}" in html
    html = owner_client.get(f"/runs/?job={job.id}&status=succeeded").content.decode()
    assert f"run-{ok.id}" in html


def test_an_invalid_filter_shows_an_error_not_a_crash(owner_client, job):
    response = owner_client.get("/runs/?status=bogus&scheduled_after=yesterday")
    assert response.status_code == 200
    assert "field-error" in response.content.decode()


def test_the_runs_page_is_live_over_a_websocket(owner_client, settings):
    html = owner_client.get("/runs/?status=failed").content.decode()
    assert 'data-live-url="/ws/live/?view=runs&amp;since=' in html and "status=failed" in html


def test_without_redis_the_runs_page_polls(owner_client, settings):
    settings.REDIS_URL = ""
    html = owner_client.get("/runs/").content.decode()
    assert 'hx-trigger="every 2s"' in html and "data-live-url" not in html
    partial = owner_client.get("/runs/", HTTP_HX_TARGET="run-rows", **HTMX).content.decode()
    assert partial.lstrip().startswith('<div id="run-rows"')


def test_run_detail_shows_every_attempt(owner_client, failed_run):
    html = owner_client.get(f"/runs/{failed_run.id}/").content.decode()
    assert html.count("HTTP 500") >= 2 and "boom" in html and "webhook-id" in html
    assert str(failed_run.id) in html


def test_attempts_expand_under_the_row_and_fold_again(owner_client, failed_run):
    html = owner_client.get(f"/runs/{failed_run.id}/attempts/", **HTMX).content.decode()
    assert html.lstrip().startswith(f'<tr id="attempts-{failed_run.id}" class="attempts">')
    assert "120 ms" in html and "boom" in html and "Content-Type: application/json" in html
    html = owner_client.get(f"/runs/{failed_run.id}/attempts/?hide=1", **HTMX).content.decode()
    assert "hidden" in html and "boom" not in html
    # Without JavaScript, the link goes to the run's page.
    assert owner_client.get(f"/runs/{failed_run.id}/attempts/")["Location"] == f"/runs/{failed_run.id}/"


def test_replay_one_run_by_htmx_returns_its_row(owner_client, failed_run):
    html = owner_client.post(f"/runs/{failed_run.id}/replay/", {"row": "dead"}, **HTMX).content.decode()
    assert html.lstrip().startswith(f'<tbody id="run-{failed_run.id}"')
    assert "status-scheduled" in html and "Replayed" in html
    failed_run.refresh_from_db()
    assert failed_run.status == RunStatus.SCHEDULED
    html = owner_client.post(f"/runs/{failed_run.id}/replay/", **HTMX).content.decode()
    assert "Only failed runs can be replayed" in html


def test_dead_letters_list_failed_runs_with_their_last_error(owner_client, job, failed_run):
    make_run(job)
    html = owner_client.get("/dead-letters/").content.decode()
    assert f"run-{failed_run.id}" in html and "HTTP 500" in html
    assert html.count('<tbody id="run-') == 1


def test_bulk_replay_without_javascript_asks_for_confirmation_first(owner_client, job, failed_run):
    second = make_run(job, status=RunStatus.FAILED, error="HTTP 502", status_code=502, minutes_ago=9)
    response = owner_client.post("/dead-letters/replay/", {"runs": [failed_run.id, second.id]})
    html = response.content.decode()
    assert response.status_code == 200 and "Replay 2 failed runs?" in html
    failed_run.refresh_from_db()
    assert failed_run.status == RunStatus.FAILED  # nothing happened yet
    response = owner_client.post("/dead-letters/replay/", {"runs": [failed_run.id, second.id], "confirmed": "1"})
    assert response.status_code == 302
    failed_run.refresh_from_db()
    second.refresh_from_db()
    assert failed_run.status == second.status == RunStatus.SCHEDULED
    assert failed_run.attempts_before_replay == 2


def test_bulk_replay_by_htmx_updates_the_rows_out_of_band(owner_client, failed_run):
    html = owner_client.post(
        "/dead-letters/replay/", {"runs": [failed_run.id], "confirmed": "1"}, **HTMX
    ).content.decode()
    assert "Replayed 1 run." in html
    tag = html.split(f'<tbody id="run-{failed_run.id}"')[1].split(">")[0]
    assert 'data-status="scheduled"' in tag and 'hx-swap-oob="outerHTML"' in tag
    assert html.index("<template>") < html.index(f'<tbody id="run-{failed_run.id}"')  # rows travel in <template>


def test_bulk_replay_needs_a_selection(owner_client):
    response = owner_client.post("/dead-letters/replay/", {"confirmed": "1"})
    assert response.status_code == 302
    html = owner_client.post("/dead-letters/replay/", {"confirmed": "1"}, **HTMX).content.decode()
    assert 'role="alert"' in html and "Select at least one" in html
    response = owner_client.post("/dead-letters/replay/", {"runs": ["not-a-uuid"], "confirmed": "1"})
    assert response.status_code == 302


@pytest.mark.parametrize("page", ["/runs/", "/dead-letters/"])
def test_with_many_jobs_the_job_filter_takes_a_name_or_an_id_instead_of_listing_them(
    owner_client, tenant, job, failed_run, other_job, monkeypatch, page
):
    """Past JOB_MENU_LIMIT jobs a drop-down of every job is replaced by a box (a tenant of 13,360
    jobs made each page ~1 MB and ~1 s): the job is found by exact name or id, within the tenant."""
    from apps.dashboard.forms import runs as run_forms
    from apps.jobs.services import job_create

    from .conftest import JOB_FIELDS

    monkeypatch.setattr(run_forms, "JOB_MENU_LIMIT", 2)
    assert '<select name="job"' in owner_client.get(page).content.decode(), "2 jobs: still a drop-down"
    for n in range(2):
        make_run(job_create(tenant=tenant, name=f"twin-{n}", **JOB_FIELDS), status=RunStatus.FAILED, error="x")
    job_create(tenant=tenant, name="twin-0", **JOB_FIELDS)  # two jobs of that name now
    html = owner_client.get(page).content.decode()
    assert '<select name="job"' not in html and '<input type="text" name="job"' in html
    assert "twin-1" in html, "no filter: every run listed"

    by_name = owner_client.get(f"{page}?job=nightly-report").content.decode()
    by_id = owner_client.get(f"{page}?job={job.id}").content.decode()
    for html in (by_name, by_id):
        assert f"run-{failed_run.id}" in html and "twin-1" not in html and "field-error" not in html
    for query, error in [("twin-0", "Several jobs are named"), ("nope", "No job named"),
                         (str(other_job.id), "No job with this id")]:  # fmt: skip
        response = owner_client.get(f"{page}?job={query}")
        assert response.status_code == 200 and error in response.content.decode(), query
    assert "globex-secret-job" not in owner_client.get(f"{page}?job={other_job.id}").content.decode()
