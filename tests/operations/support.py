"""Dead letters in bulk for the operations tests: bulk inserts, not the API (5,000 in well under a second)."""

from datetime import timedelta

from django.db import connection
from django.utils import timezone

from apps.jobs.models import JobRun, RunAttempt, RunStatus


def dead_letters(job, n: int, *, status_code: int | None = 500, error_kind: str = "http", start=None) -> list:
    """`n` runs of `job` in `failed` after one attempt (status_code / error_kind), one a minute
    back from `start`; returns their ids."""
    start = start or timezone.now() - timedelta(days=30)
    runs = [
        JobRun(
            tenant_id=job.tenant_id,
            definition=job,
            partition=job.partition,
            scheduled_for=start + timedelta(minutes=i),
            available_at=start,
            status=RunStatus.FAILED,
            attempt_count=1,
            finished_at=start,
            status_reason="Failed.",
        )
        for i in range(n)
    ]
    JobRun.objects.bulk_create(runs, batch_size=2000)
    attempts = [
        RunAttempt(
            run=run, number=1, started_at=start, finished_at=start, status_code=status_code, error_kind=error_kind
        )
        for run in runs
    ]
    RunAttempt.objects.bulk_create(attempts, batch_size=2000)
    return [run.id for run in runs]


class ReplayLog:
    """Every failed -> scheduled change of a run, recorded by a trigger on jobs_jobrun: counts
    replays as status transitions, whoever made them (a chunk replayed twice shows twice)."""

    def __enter__(self):
        with connection.cursor() as cursor:
            cursor.execute(
                """
                CREATE TABLE IF NOT EXISTS test_replay_log (run_id uuid NOT NULL);
                TRUNCATE test_replay_log;
                CREATE OR REPLACE FUNCTION test_log_replay() RETURNS trigger AS $$
                BEGIN INSERT INTO test_replay_log VALUES (NEW.id); RETURN NEW; END $$ LANGUAGE plpgsql;
                DROP TRIGGER IF EXISTS test_log_replay ON jobs_jobrun;
                CREATE TRIGGER test_log_replay AFTER UPDATE ON jobs_jobrun FOR EACH ROW
                  WHEN (OLD.status = 'failed' AND NEW.status = 'scheduled') EXECUTE FUNCTION test_log_replay();
                """
            )
        return self

    def counts(self) -> tuple[int, int]:
        """(replays, distinct runs replayed)."""
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*), count(DISTINCT run_id) FROM test_replay_log")
            return cursor.fetchone()

    def __exit__(self, *exc):
        with connection.cursor() as cursor:
            cursor.execute(
                "DROP TRIGGER IF EXISTS test_log_replay ON jobs_jobrun; DROP TABLE IF EXISTS test_replay_log; "
                "DROP FUNCTION IF EXISTS test_log_replay()"
            )
