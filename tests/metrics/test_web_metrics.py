"""The web's /metrics (issue #13, deliverable 1): protected by a bearer token, and its database
gauges (ready runs, oldest ready run, scheduling lag, quarantined jobs) match the rows."""

from datetime import timedelta

import pytest
from django.test import Client, override_settings
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from apps.jobs.models import JobDefinition, JobRun, JobStatus, Priority, RunStatus
from tests.factories import JobFactory

TOKEN = "s3cret-metrics-token"


def scrape(client: Client, token: str | None = TOKEN, **headers):
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return client.get("/metrics", headers=headers)


def samples(response) -> dict:
    """{(metric name, ((label, value), ...)): value} of one scrape."""
    found = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


@pytest.mark.django_db
def test_metrics_are_off_without_a_token_and_refuse_a_wrong_one():
    client = Client()
    with override_settings(CHIME_METRICS_TOKEN=""):
        off = scrape(client)
        assert off.status_code == 404 and "CHIME_METRICS_TOKEN" in off.json()["detail"]
    with override_settings(CHIME_METRICS_TOKEN=TOKEN):
        assert scrape(client, token=None).status_code == 401
        wrong = scrape(client, token="guess")
        assert wrong.status_code == 401 and wrong["WWW-Authenticate"].startswith("Bearer")
        assert scrape(client, token=TOKEN + "x").status_code == 401
        right = scrape(client, HTTP_HOST="10.0.0.7:8000")  # Prometheus addresses the pod's IP
        assert right.status_code == 200 and right["Content-Type"].startswith("text/plain")
        assert TOKEN not in right.content.decode()


def make_run(job, *, status, available_ago: float, priority=Priority.DEFAULT, offset=0):
    now = timezone.now()
    return JobRun.objects.create(
        tenant=job.tenant,
        definition=job,
        partition=job.partition,
        priority=priority,
        scheduled_for=now - timedelta(seconds=available_ago, microseconds=offset),
        available_at=now - timedelta(seconds=available_ago),
        status=status,
        queued_at=now if status == RunStatus.QUEUED else None,
    )


@pytest.mark.django_db
@override_settings(CHIME_METRICS_TOKEN=TOKEN)
def test_database_gauges_match_the_rows(tenant):
    job = JobFactory(tenant=tenant, next_fire_at=timezone.now() + timedelta(hours=1))
    make_run(job, status=RunStatus.SCHEDULED, available_ago=40, offset=1)  # ready, waiting in PostgreSQL
    make_run(job, status=RunStatus.QUEUED, available_ago=10, offset=2)  # ready, on the broker
    make_run(job, status=RunStatus.RETRYING, available_ago=-60, offset=3)  # retrying later: not ready
    make_run(job, status=RunStatus.RUNNING, available_ago=90, offset=4)  # being delivered: not ready
    make_run(job, status=RunStatus.SUCCEEDED, available_ago=300, offset=5)
    make_run(job, status=RunStatus.QUEUED, available_ago=5, priority=Priority.HIGH, offset=6)

    overdue = JobFactory(tenant=tenant, next_fire_at=timezone.now() - timedelta(seconds=20))
    JobFactory(
        tenant=tenant,
        status=JobStatus.PAUSED,
        status_reason="Paused by Chime: its schedule could not be evaluated: unknown time zone 'Mars/Olympus'.",
    )
    JobFactory(tenant=tenant, status=JobStatus.PAUSED, status_reason="")  # paused by its owner

    found = samples(scrape(Client()))
    assert found[("chime_ready_runs", (("priority", "default"),))] == 2
    assert found[("chime_ready_runs", (("priority", "high"),))] == 1
    assert found[("chime_ready_runs", (("priority", "low"),))] == 0
    assert 40 <= found[("chime_oldest_ready_run_age_seconds", (("priority", "default"),))] < 45
    assert 5 <= found[("chime_oldest_ready_run_age_seconds", (("priority", "high"),))] < 10
    assert found[("chime_oldest_ready_run_age_seconds", (("priority", "low"),))] == 0
    assert found[("chime_quarantined_jobs", ())] == 1
    partition = JobDefinition.objects.get(id=overdue.id).partition
    assert 20 <= found[("chime_scheduler_lag_seconds", (("partition", str(partition)),))] < 25
    others = [
        v
        for (name, labels), v in found.items()
        if name == "chime_scheduler_lag_seconds" and labels != (("partition", str(partition)),)
    ]
    assert others and set(others) == {0.0}, "partitions with nothing due report no lag"
