"""Test data builders (factory_boy)."""

from datetime import UTC, datetime

import factory
from django.utils import timezone

from apps.jobs.models import JobDefinition, JobRun, RunStatus, ScheduleType
from apps.tenants.services import tenant_create


class JobFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = JobDefinition

    tenant = factory.LazyFunction(lambda: tenant_create(slug=f"t{datetime.now(UTC).timestamp():.0f}"))
    name = factory.Sequence(lambda n: f"job-{n}")
    schedule_type = ScheduleType.CRON
    cron_expression = "0 * * * *"
    timezone = "UTC"
    target_url = "http://127.0.0.1:9/hook"


def queued_runs(job, n) -> list[JobRun]:
    """`n` runs of `job` in `queued`, as a release leaves them (distinct occurrences)."""
    now = timezone.now()
    return [
        JobRun.objects.create(
            tenant=job.tenant,
            definition=job,
            partition=job.partition,
            scheduled_for=now.replace(microsecond=i),
            available_at=now,
            status=RunStatus.QUEUED,
            queued_at=now,
        )
        for i in range(n)
    ]
