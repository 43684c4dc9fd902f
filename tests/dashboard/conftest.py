"""Fixtures for the dashboard: tenant A (acme) with an owner, an admin and a viewer; tenant B (globex)
with its own owner and data, so every test can check that nothing of B shows up for A."""

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from apps.jobs.models import ErrorKind, JobRun, RunAttempt, RunStatus
from apps.jobs.services import job_create
from apps.tenants.models import Membership, Role

JOB_FIELDS = {
    "schedule_type": "cron",
    "cron_expression": "0 2 * * *",
    "timezone": "Europe/Berlin",
    "target_url": "http://127.0.0.1:9/hook",
}


def make_user(username: str, tenant=None, role=Role.OWNER):
    user = get_user_model().objects.create_user(username=username, email=username, password="pw-Chime-2026!")
    if tenant is not None:
        Membership.objects.create(user=user, tenant=tenant, role=role)
    return user


def logged_in(user, **client_kwargs) -> Client:
    client = Client(**client_kwargs)
    client.force_login(user)
    return client


def make_run(job, *, status=RunStatus.SUCCEEDED, minutes_ago=5, attempts=1, status_code=200, error=""):
    now = timezone.now()
    scheduled = now - timedelta(minutes=minutes_ago)
    finished = status in (RunStatus.SUCCEEDED, RunStatus.FAILED)
    run = JobRun.objects.create(
        tenant_id=job.tenant_id,
        definition=job,
        partition=job.partition,
        scheduled_for=scheduled,
        available_at=scheduled,
        status=status,
        status_reason=f"Attempt {attempts} failed (no attempts left): {error}" if status == RunStatus.FAILED else "",
        attempt_count=attempts,
        queued_at=scheduled if attempts else None,
        started_at=scheduled + timedelta(seconds=1) if attempts else None,
        finished_at=now if finished else None,
    )
    for number in range(1, attempts + 1):
        RunAttempt.objects.create(
            run=run,
            number=number,
            started_at=scheduled + timedelta(seconds=number),
            finished_at=scheduled + timedelta(seconds=number, milliseconds=120),
            status_code=status_code,
            error=error,
            error_kind=ErrorKind.HTTP if error else "",
            duration_ms=120,
            response_excerpt="boom" if error else "ok",
            request_headers={"Content-Type": "application/json", "webhook-id": str(run.id)},
        )
    return run


@pytest.fixture
def redis_reachable():
    """Redis for pub/sub only: unlike the root `redis_required`, this does not flush the broker DB."""
    from django.conf import settings

    from tests.conftest import _require

    _require("Redis", settings.REDIS_URL, 6379)


@pytest.fixture
def owner(tenant):
    return make_user("owner@acme.test", tenant, Role.OWNER)


@pytest.fixture
def admin_member(tenant):
    return make_user("admin@acme.test", tenant, Role.ADMIN)


@pytest.fixture
def viewer(tenant):
    return make_user("viewer@acme.test", tenant, Role.VIEWER)


@pytest.fixture
def other_owner(other_tenant):
    return make_user("owner@globex.test", other_tenant, Role.OWNER)


@pytest.fixture
def owner_client(owner) -> Client:
    return logged_in(owner)


@pytest.fixture
def viewer_client(viewer) -> Client:
    return logged_in(viewer)


@pytest.fixture
def job(tenant):
    return job_create(tenant=tenant, name="nightly-report", **JOB_FIELDS)


@pytest.fixture
def other_job(other_tenant):
    return job_create(tenant=other_tenant, name="globex-secret-job", **JOB_FIELDS)


@pytest.fixture
def failed_run(job):
    return make_run(job, status=RunStatus.FAILED, attempts=2, status_code=500, error="HTTP 500")


@pytest.fixture
def other_failed_run(other_job):
    return make_run(other_job, status=RunStatus.FAILED, attempts=1, status_code=500, error="HTTP 500 globex")
