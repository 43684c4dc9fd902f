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
