from apps.core.migration_ops import AddIndexConcurrentlyOnPostgres, RemoveIndexConcurrentlyOnPostgres
from django.db import migrations, models


class Migration(migrations.Migration):
    """jobrun_releasable_idx becomes jobrun_due_idx, the same rows behind a planner fence
    (`attempt_count >= 0`, always true; apps/jobs/models.py says why). The new one is built first,
    then the old one dropped, both CONCURRENTLY: a deploy on a large jobs_jobrun blocks no writer,
    and the release's cheap "anything due?" check has an index throughout."""

    atomic = False

    dependencies = [
        ("jobs", "0008_dead_letter_indexes"),
    ]

    operations = [
        AddIndexConcurrentlyOnPostgres(
            model_name="jobrun",
            index=models.Index(
                condition=models.Q(("attempt_count__gte", 0), ("status__in", ["scheduled", "retrying"])),
                fields=["available_at", "partition"],
                name="jobrun_due_idx",
            ),
        ),
        RemoveIndexConcurrentlyOnPostgres(model_name="jobrun", name="jobrun_releasable_idx"),
    ]
