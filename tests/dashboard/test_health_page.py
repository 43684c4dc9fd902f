"""The delivery health page: the tenant's own jobs and hosts, worst first; a bad window is a 400."""

import pytest

from apps.jobs.models import RunStatus

from .conftest import make_run

pytestmark = pytest.mark.django_db


def test_health_page_lists_own_jobs_and_hosts_worst_first(owner_client, job, other_job):
    make_run(job)
    make_run(job, status=RunStatus.FAILED, attempts=2, status_code=502, error="HTTP 502")
    make_run(other_job, status=RunStatus.FAILED, status_code=500, error="HTTP 500")
    response = owner_client.get("/health/")
    assert response.status_code == 200
    html = response.content.decode()
    assert job.name in html and other_job.name not in html
    assert "HTTP 502" in html and "HTTP 500" not in html
    (row,) = response.context["jobs"]
    health = row["health"]
    assert health.attempts == 3 and health.succeeded_attempts == 1 and health.runs_failed == 1
    assert f'href="/jobs/{job.id}/"' in html


def test_health_page_day_window_and_a_bad_window(owner_client, job):
    make_run(job, minutes_ago=300)  # five hours ago: in the day, not in the hour
    assert owner_client.get("/health/").context["jobs"] == []
    assert len(owner_client.get("/health/", {"window": "day"}).context["jobs"]) == 1
    bad = owner_client.get("/health/", {"window": "year"})
    assert bad.status_code == 400 and "Unknown window" in bad.content.decode()


def test_health_page_needs_a_login(client):
    assert client.get("/health/").status_code == 302
