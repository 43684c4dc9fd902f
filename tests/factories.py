"""Test data builders (factory_boy)."""

from datetime import UTC, datetime

import factory

from apps.jobs.models import JobDefinition, ScheduleType
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
