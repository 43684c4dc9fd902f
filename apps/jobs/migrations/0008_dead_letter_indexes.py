from apps.core.migration_ops import AddIndexConcurrentlyOnPostgres
from django.db import migrations, models


class Migration(migrations.Migration):
    """Two partial indexes of the failed runs (dead letters): built CONCURRENTLY, so a deploy on a
    large jobs_jobrun does not block the scheduler's and the workers' writes while they build."""

    atomic = False

    dependencies = [
        ("jobs", "0007_drop_redundant_run_indexes"),
    ]

    operations = [
        AddIndexConcurrentlyOnPostgres(
            model_name="jobrun",
            index=models.Index(
                condition=models.Q(status="failed"),
                fields=["tenant", "-finished_at", "-created_at"],
                name="jobrun_dead_letters_idx",
            ),
        ),
        AddIndexConcurrentlyOnPostgres(
            model_name="jobrun",
            index=models.Index(condition=models.Q(status="failed"), fields=["tenant", "-id"], name="jobrun_failed_id_idx"),
        ),
    ]
