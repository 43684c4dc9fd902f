"""Recording outcomes in the one lock order (docs/architecture.md#lock-order).

How an outcome is judged and written is apps/delivery/outcomes.py; this only takes the locks in
the order every other writer of jobs and runs takes them, around it."""

from django.db import connection
from django.utils import timezone

from apps.core.ids import uuid_text
from apps.core.prepared import id_array, prepared_cursor

from .outcomes import classify, record_outcomes


def record_in_lock_order(deliveries: list[tuple], *, owner: str) -> dict[str, int]:
    """record_outcomes under the one lock order (docs/architecture.md#lock-order): the jobs whose
    row the recording will write first (FOR KEY SHARE, by id: it waits for a pause, update or
    delete holding the job, and lets other recorders through), then the runs. Recording locks runs
    and then updates their jobs (failure counter, 410 Gone, circuit breaker); without the job lock
    first, that is the inversion that deadlocked against a delete (job, then its runs).

    The job lock is taken at the start of each transaction record_outcomes opens (the batch, or
    each run's own when the batch fails), and also reads which jobs have a failure counter to
    reset, so a batch of successes sends no UPDATE of their jobs."""
    return record_outcomes(deliveries, owner=owner, now=timezone.now(), lock_jobs=lock_jobs)


# The jobs a recording will write: those of runs that did not succeed (their counter, a 410's
# pause, the breaker) and those whose counter a success resets. Only the rows that pass the WHERE
# are locked: the job of a success whose counter is 0 is read, not locked. A lock writes the row
# (its xmax), so locking every job of a spike's successes cost a heap write per run (issue #12).
LOCK_JOBS_SQL = """
SELECT id, consecutive_failures FROM jobs_jobdefinition
 WHERE id = ANY(%(jobs)s::uuid[]) AND (consecutive_failures > 0 OR id = ANY(%(touched)s::uuid[]))
 ORDER BY id FOR KEY SHARE"""


def lock_jobs(deliveries: list[tuple]) -> set | None:
    """FOR KEY SHARE on the jobs the recording of `deliveries` will write, by id; returns those
    whose failure counter is not 0."""
    if connection.vendor != "postgresql":
        return None
    jobs = sorted({uuid_text(run.definition_id) for run, _, _ in deliveries})
    unsuccessful = [run for run, _, response in deliveries if not classify(response).succeeded]
    touched = sorted({uuid_text(run.definition_id) for run in unsuccessful})
    with prepared_cursor() as cursor:
        cursor.execute(LOCK_JOBS_SQL, {"jobs": id_array(jobs), "touched": id_array(touched)})
        return {job_id for job_id, failures in cursor.fetchall() if failures}
