from django.db import migrations, models

from apps.core.migration_ops import AddIndexConcurrentlyOnPostgres


class Migration(migrations.Migration):
    """The tenant's live jobs, for the jobs quota's count on every create (apps/jobs/models.py):
    built CONCURRENTLY, so a deploy on a large jobs_jobdefinition does not block the API's and
    the scheduler's writes while it builds."""

    atomic = False

    dependencies = [
        ("jobs", "0011_run_foreign_keys_without_constraint"),
        ("tenants", "0003_tenantlimits_run_retention_days"),
    ]

    operations = [
        AddIndexConcurrentlyOnPostgres(
            model_name="jobdefinition",
            index=models.Index(
                condition=models.Q(("status__in", ("deleted", "completed")), _negated=True),
                fields=["tenant"],
                name="jobdef_tenant_live_idx",
            ),
        ),
    ]
