"""Drop the database's foreign-key constraints of JobRun.tenant and RunAttempt.run (issue #12).

Each was a deferred trigger per inserted row: a lookup of the parent and a FOR KEY SHARE lock on
it (for an attempt, a WAL record on its run's row), ~20 µs of PostgreSQL's CPU per delivered run
together, for no integrity the hot path needs (apps/jobs/models.py says why for each). The
relations stay (Django cascades deletes as before); `audit_runs` reports what a constraint would
have refused (attempt_without_run, run_tenant_mismatch). Dropping a constraint validates nothing:
a brief lock on each table, whatever its size.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0010_drop_redundant_definition_tenant_index'),
        ('tenants', '0003_tenantlimits_run_retention_days'),
    ]

    operations = [
        migrations.AlterField(
            model_name='jobrun',
            name='tenant',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='runs', to='tenants.tenant'),
        ),
        migrations.AlterField(
            model_name='runattempt',
            name='run',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='attempts', to='jobs.jobrun'),
        ),
    ]
