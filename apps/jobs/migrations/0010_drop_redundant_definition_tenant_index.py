"""Drop the definition's own index on tenant_id: jobdef_tenant_created_idx (tenant, -created_at)
serves every lookup by tenant, and each fire rewrites the definition (issue #12).

Only the index goes: the AlterField Django would run drops and re-adds the foreign key, which
validates it over the whole table under a lock that blocks writes (minutes at 10M definitions).
On PostgreSQL the index is dropped CONCURRENTLY, so the migration runs outside a transaction.
"""

import django.db.models.deletion
from django.db import migrations, models

INDEX = "jobs_jobdefinition_tenant_id_0282a1d6"


def _concurrently(schema_editor) -> str:
    return "CONCURRENTLY " if schema_editor.connection.vendor == "postgresql" else ""


def drop_index(apps, schema_editor):
    schema_editor.execute(f'DROP INDEX {_concurrently(schema_editor)}IF EXISTS "{INDEX}"')


def create_index(apps, schema_editor):
    schema_editor.execute(
        f'CREATE INDEX {_concurrently(schema_editor)}IF NOT EXISTS "{INDEX}" ON "jobs_jobdefinition" ("tenant_id")'
    )


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("jobs", "0009_due_index_planner_fence"),
        ("tenants", "0003_tenantlimits_run_retention_days"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="jobdefinition",
                    name="tenant",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="jobs",
                        to="tenants.tenant",
                    ),
                ),
            ],
            database_operations=[migrations.RunPython(drop_index, create_index, elidable=False)],
        ),
    ]
