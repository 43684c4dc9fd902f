"""Overview: last-hour numbers and small server-side charts."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.jobs.models import JobRun, RunStatus

from .conftest import make_run

pytestmark = pytest.mark.django_db


def test_overview_shows_rates_lag_and_queue_age(owner_client, job, other_job):
    for _ in range(3):
        make_run(job)
    make_run(job, status=RunStatus.FAILED, error="HTTP 500")
    queued = make_run(job, status=RunStatus.QUEUED, attempts=0)
    JobRun.objects.filter(pk=queued.pk).update(queued_at=timezone.now() - timedelta(seconds=90), started_at=None)
    for _ in range(5):
        make_run(other_job, status=RunStatus.FAILED, error="HTTP 500")  # not counted for acme
    response = owner_client.get("/")
    stats = response.context["stats"]
    assert (stats.succeeded, stats.failed) == (3, 1)
    assert stats.success_rate == 0.75
    assert stats.p95_lag_seconds == pytest.approx(1.0, abs=0.01)
    assert stats.queued_now == 1 and 89 < stats.oldest_queued_seconds < 120
    html = response.content.decode()
    assert "75.0 %" in html and html.count("<svg") == 4
    assert 'role="img"' in html and "<title>" in html


def test_overview_partial_for_its_refresh(owner_client, job):
    html = owner_client.get("/", HTTP_HX_REQUEST="true").content.decode()
    assert html.lstrip().startswith('<section id="stats"')
