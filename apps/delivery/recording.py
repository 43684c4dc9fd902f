"""Recording outcomes in the one lock order (docs/architecture.md#lock-order).

How an outcome is judged and written is apps/delivery/outcomes.py; this only takes the locks in
the order every other writer of jobs and runs takes them, around it."""

from django.db import connection, transaction
from django.utils import timezone

from .outcomes import record_outcomes


def record_in_lock_order(deliveries: list[tuple], *, owner: str) -> dict[str, int]:
    """record_outcomes under the one lock order (docs/architecture.md#lock-order): the runs' jobs
    first (FOR KEY SHARE, by id: it waits for a pause, update or delete holding the job, and lets
    other recorders through), then the runs. Recording locks runs and then updates their jobs
    (failure counter, 410 Gone, circuit breaker); without the job lock first, that is the
    inversion that deadlocked against a delete (job, then its runs)."""
    with transaction.atomic():
        if connection.vendor == "postgresql":
            job_ids = sorted({str(run.definition_id) for run, _, _ in deliveries})
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT id FROM jobs_jobdefinition WHERE id = ANY(%s::uuid[]) ORDER BY id FOR KEY SHARE",
                    [job_ids],
                )
        return record_outcomes(deliveries, owner=owner, now=timezone.now())
