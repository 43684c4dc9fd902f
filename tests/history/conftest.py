"""Run history fixtures: an archive storage of the test's own (a temporary directory), and runs
made old by setting their created_at/finished_at (auto_now_add cannot be passed)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.jobs.models import JobRun, RunAttempt, RunStatus
from tests.factories import JobFactory


@pytest.fixture(autouse=True)
def archive_dir(settings, tmp_path):
    settings.STORAGES = {
        **settings.STORAGES,
        "chime_archive": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(tmp_path / "archive")},
        },
    }
    return tmp_path / "archive"


class RunMaker:
    """Runs of one job, `days_old` days in the past, in any status, with `attempts` attempts."""

    def __init__(self, tenant):
        self.job = JobFactory(tenant=tenant)
        self.count = 0

    def __call__(self, *, days_old: float, status=RunStatus.SUCCEEDED, attempts: int = 1, n: int = 1) -> list[JobRun]:
        runs = []
        for _ in range(n):
            self.count += 1
            when = timezone.now() - timedelta(days=days_old, microseconds=self.count)
            run = JobRun.objects.create(
                tenant=self.job.tenant,
                definition=self.job,
                partition=self.job.partition,
                scheduled_for=when,
                available_at=when,
                status=status,
                attempt_count=attempts,
            )
            RunAttempt.objects.bulk_create(
                RunAttempt(
                    run=run,
                    number=i + 1,
                    started_at=when,
                    finished_at=when,
                    status_code=200 if status == RunStatus.SUCCEEDED else 500,
                    duration_ms=12,
                    request_headers={"webhook-id": str(run.id), "authorization": "Bearer s3cret"},
                    worker="w1",
                )
                for i in range(attempts)
            )
            finished = when if status in ("succeeded", "failed", "cancelled", "skipped") else None
            JobRun.objects.filter(pk=run.pk).update(created_at=when, finished_at=finished)
            run.refresh_from_db()
            runs.append(run)
        return runs


@pytest.fixture
def make_runs(tenant):
    return RunMaker(tenant)


@pytest.fixture
def make_other_runs(other_tenant):
    return RunMaker(other_tenant)
