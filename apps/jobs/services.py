"""Writes for job definitions and runs. Each public function is one transaction."""

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from apps.tenants.models import Tenant

from .models import JobDefinition, JobStatus, ScheduleType
from .schedules import CronSchedule


def next_fire_after(definition: JobDefinition, after: datetime) -> datetime | None:
    """The first occurrence of a cron definition strictly after `after` (UTC), or None."""
    return CronSchedule.parse(definition.cron_expression, definition.timezone).next_after(after)


def initial_next_fire_at(definition: JobDefinition, now: datetime) -> datetime | None:
    if definition.schedule_type == ScheduleType.ONCE:
        return definition.run_at
    return next_fire_after(definition, now)


@transaction.atomic
def job_create(*, tenant: Tenant, enabled: bool = True, **fields) -> JobDefinition:
    """Create a job. `fields` are JobDefinition fields, already validated by the caller."""
    now = timezone.now()
    definition = JobDefinition(tenant=tenant, **fields)
    if definition.schedule_type == ScheduleType.ONCE and definition.run_at is None:
        definition.run_at = now
    definition.status = JobStatus.ACTIVE if enabled else JobStatus.PAUSED
    definition.next_fire_at = initial_next_fire_at(definition, now)
    definition.save()
    return definition
