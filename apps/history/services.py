"""Run history retention: archive, then prune, in short bounded batches.

The design and its measurements: docs/architecture.md#run-history-and-retention.

What leaves the hot store: a tenant's terminal runs (succeeded, cancelled, skipped) created and
finished before its retention (CHIME_RUN_RETENTION_DAYS, or its TenantLimits override), and dead
letters (failed) before CHIME_DEAD_LETTER_RETENTION_DAYS. Runs that are scheduled, queued, running
or retrying are never touched. Each batch of at most CHIME_PRUNE_BATCH_SIZE runs of one UTC day is:

1. read (no lock), with its attempts, and written as one archive part, read back and verified;
2. then, in one short transaction: its rows locked with SKIP LOCKED and compared with what was
   written (a dead letter replayed meanwhile has changed), the index row inserted, the attempts
   and the runs deleted by primary key. If anything changed, the transaction is rolled back,
   the file removed and the batch read again.

So a run is deleted only in the transaction that records its archive, the cost of a batch is
the same on a table of a thousand or a billion rows (index range reads, primary-key deletes),
nothing waits on the scheduler's or the workers' locks, and a pass stopped anywhere resumes by
simply running again (what was deleted is gone, part numbers continue after the last one).
"""

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, time, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Max, Min, Q

from apps.core.idempotency import KEY_LIFETIME
from apps.core.models import IdempotencyRecord
from apps.jobs.models import JobRun, RunAttempt, RunStatus
from apps.scheduler.models import SchedulerLease, SchedulerNode
from apps.tenants.models import Tenant
from apps.tenants.quotas import effective_limits

from . import archive
from .models import ArchiveKind, RunArchive

logger = logging.getLogger(__name__)

Progress = Callable[[int, int], None] | None

PRUNED_STATUSES = (RunStatus.SUCCEEDED, RunStatus.CANCELLED, RunStatus.SKIPPED)
DEAD_LETTER_STATUSES = (RunStatus.FAILED,)
# A scheduler node whose heartbeat is older than this is long dead (live ones beat every few s).
STALE_NODE_AGE = timedelta(hours=24)
# A batch whose runs keep changing under it (replays) is given up after this many tries; the
# next pass picks those runs up again.
MAX_BATCH_TRIES = 3


@dataclass
class PruneResult:
    """What one pass did (or, with dry_run, would do)."""

    tenant: str = ""
    runs: int = 0
    attempts: int = 0
    dead_letters: int = 0
    archives: int = 0
    bytes: int = 0
    batches: int = 0
    skipped_busy: bool = False  # another pass holds this tenant's prune lock
    dry_run: bool = False
    archive_ids: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


def batch_size() -> int:
    return settings.CHIME_PRUNE_BATCH_SIZE


def cutoffs(*, tenant, now: datetime) -> tuple[datetime, datetime]:
    """(terminal runs' cutoff, dead letters' cutoff): runs created and finished before go."""
    days = effective_limits(tenant).run_retention_days
    return now - timedelta(days=days), now - timedelta(days=settings.CHIME_DEAD_LETTER_RETENTION_DAYS)


def prunable_runs(*, tenant, now: datetime):
    """Every run of the tenant that retention lets go, whatever else (a queryset, unordered)."""
    run_cutoff, dead_cutoff = cutoffs(tenant=tenant, now=now)
    return _eligible(tenant, PRUNED_STATUSES, run_cutoff) | _eligible(tenant, DEAD_LETTER_STATUSES, dead_cutoff)


def _eligible(tenant, statuses, cutoff: datetime):
    # created_at bounds the range on jobrun_tenant_created_idx; finished_at keeps a run replayed
    # long after it was created for a full retention after it ended.
    return JobRun.objects.filter(tenant=tenant, status__in=statuses, created_at__lt=cutoff).filter(
        Q(finished_at__isnull=True) | Q(finished_at__lt=cutoff)
    )


def prune_tenant(*, tenant: Tenant, now: datetime, progress: Progress = None, dry_run: bool = False) -> PruneResult:
    """Archive then delete what the tenant's retention lets go. Returns the counts. Safe to run
    again at any time (resumes); a second concurrent pass for the same tenant returns at once
    with skipped_busy."""
    result = PruneResult(tenant=tenant.slug, dry_run=dry_run)
    run_cutoff, dead_cutoff = cutoffs(tenant=tenant, now=now)
    sweeps = [
        _eligible(tenant, PRUNED_STATUSES, run_cutoff),
        _eligible(tenant, DEAD_LETTER_STATUSES, dead_cutoff),
    ]
    if dry_run:
        result.runs = sum(sweep.count() for sweep in sweeps)
        result.dead_letters = sweeps[1].count()
        result.attempts = RunAttempt.objects.filter(run__in=prunable_runs(tenant=tenant, now=now)).count()
        return result
    with _tenant_lock("prune", tenant) as acquired:
        if not acquired:
            result.skipped_busy = True
            return result
        total = sum(sweep.count() for sweep in sweeps)
        _report(progress, 0, total)
        for index, sweep in enumerate(sweeps):
            for written in _archive_in_batches(tenant, sweep, kind=ArchiveKind.PRUNE, delete=True):
                result.runs += written.run_count
                result.attempts += written.attempt_count
                result.dead_letters += written.run_count if index == 1 else 0
                result.archives += 1
                result.bytes += written.bytes
                result.batches += 1
                result.archive_ids.append(str(written.pk))
                _report(progress, min(result.runs, total), total)
        _report(progress, total, total)
    logger.info(
        "pruned %s runs (%s attempts) of tenant %s in %s archives",
        result.runs,
        result.attempts,
        tenant.slug,
        result.archives,
    )
    return result


def export_runs(*, tenant: Tenant, start: datetime, end: datetime, progress: Progress = None) -> list[RunArchive]:
    """Archive (kind export) every run of the tenant created in [start, end), whatever its
    status, without deleting anything. Returns the archive rows written (one or more per day)."""
    if end <= start:
        raise ValueError("end must be after start")
    runs = JobRun.objects.filter(tenant=tenant, created_at__gte=start, created_at__lt=end)
    archives: list[RunArchive] = []
    with _tenant_lock("export", tenant, wait=True):
        total = runs.count()
        done = 0
        _report(progress, 0, total)
        for written in _archive_in_batches(tenant, runs, kind=ArchiveKind.EXPORT, delete=False):
            archives.append(written)
            done += written.run_count
            _report(progress, min(done, total), total)
        _report(progress, total, total)
    return archives


def prune_all(*, now: datetime, progress: Progress = None) -> dict:
    """Every tenant's pass, then the idempotency records and stale scheduler nodes. `progress`
    counts tenants."""
    tenants = list(Tenant.objects.order_by("pk"))
    results = []
    _report(progress, 0, len(tenants))
    for done, tenant in enumerate(tenants, start=1):
        results.append(prune_tenant(tenant=tenant, now=now))
        _report(progress, done, len(tenants))
    return {
        "tenants": [r.as_dict() for r in results],
        "runs": sum(r.runs for r in results),
        "attempts": sum(r.attempts for r in results),
        "archives": sum(r.archives for r in results),
        "idempotency_records": purge_idempotency_records(now=now),
        "scheduler_nodes": purge_stale_scheduler_nodes(now=now),
        "operations": purge_finished_operations(now=now),
    }


def purge_finished_operations(*, now: datetime) -> int:
    """Delete bulk operations (apps/operations) finished more than CHIME_OPERATION_RETENTION_DAYS
    ago, with their Celery results (django-celery-results' TaskResult, where their state lives).
    Unfinished ones are never touched, however old: a paused or lapsed operation may resume."""
    from django_celery_results.models import TaskResult

    from apps.operations.models import Operation

    cutoff = now - timedelta(days=settings.CHIME_OPERATION_RETENTION_DAYS)
    deleted = 0
    while True:
        with transaction.atomic():
            batch = list(Operation.objects.filter(finished_at__lt=cutoff).values_list("pk", "task_id")[: batch_size()])
            if not batch:
                return deleted
            TaskResult.objects.filter(task_id__in=[task for _, task in batch]).delete()
            Operation.objects.filter(pk__in=[pk for pk, _ in batch]).delete()
        deleted += len(batch)


def purge_idempotency_records(*, now: datetime) -> int:
    """Delete records older than their 24 h lifetime (apps/core/idempotency.py ignores them already).

    By primary-key ranges, one short statement each: there is no index on created_at (it would
    cost every keyed create a write), and a purged table holds a day of keys, so the walk over
    it is bounded by a day of traffic, not by history."""
    cutoff = now - KEY_LIFETIME
    bounds = IdempotencyRecord.objects.aggregate(low=Min("pk"), high=Max("pk"))
    if bounds["low"] is None:
        return 0
    deleted, step = 0, batch_size()
    for low in range(bounds["low"], bounds["high"] + 1, step):
        chunk = IdempotencyRecord.objects.filter(pk__gte=low, pk__lt=low + step, created_at__lt=cutoff)
        deleted += chunk._raw_delete(chunk.db)  # one DELETE: nothing points at these rows
    return deleted


def purge_stale_scheduler_nodes(*, now: datetime, older_than: timedelta = STALE_NODE_AGE) -> int:
    """Delete nodes that have not beaten for `older_than` and hold no lease (a lease row still
    naming a node is left alone, expired or not: the scheduler owns that handover)."""
    holders = SchedulerLease.objects.exclude(owner="").values("owner")
    stale = SchedulerNode.objects.filter(heartbeat_at__lt=now - older_than).exclude(owner__in=holders)
    return stale._raw_delete(stale.db)


# --- batches -------------------------------------------------------------------------------


def _archive_in_batches(tenant, runs, *, kind: str, delete: bool):
    """Yield a RunArchive per batch of `runs` (one UTC day each, oldest first). A keyset on
    (created_at, id) means rows passed over (changed under a batch, other day) are not re-read."""
    after = None
    while True:
        page = runs
        if after is not None:
            page = page.filter(created_at__gte=after[0]).exclude(created_at=after[0], id__lte=after[1])
        rows = archive.run_values(page.order_by("created_at", "id")[: batch_size()])
        if not rows:
            return
        day = _utc_day(rows[0]["created_at"])
        rows = [row for row in rows if _utc_day(row["created_at"]) == day]
        after = (rows[-1]["created_at"], rows[-1]["id"])
        written = _archive_batch(tenant, runs, rows, kind=kind, day=day, delete=delete)
        if written is not None:
            yield written


def _archive_batch(tenant, runs, rows: list[dict], *, kind: str, day, delete: bool) -> RunArchive | None:
    for _ in range(MAX_BATCH_TRIES):
        if not rows:
            return None
        part = (RunArchive.objects.filter(tenant=tenant, kind=kind, day=day).aggregate(m=Max("part"))["m"] or 0) + 1
        records = archive.run_records(rows)
        written = archive.write_file(archive.file_name(tenant=tenant, kind=kind, day=day, part=part), records)
        try:
            with transaction.atomic():
                ids = [row["id"] for row in rows]
                if delete and not _unchanged(rows, records):
                    raise _BatchChanged
                record = RunArchive.objects.create(
                    tenant=tenant,
                    kind=kind,
                    day=day,
                    part=part,
                    path=written.path,
                    run_count=written.run_count,
                    attempt_count=written.attempt_count,
                    bytes=written.bytes,
                    sha256=written.sha256,
                )
                if delete:
                    attempts = RunAttempt.objects.filter(run_id__in=archive.id_set(ids))
                    attempts._raw_delete(attempts.db)  # by the (run, number) index
                    doomed = JobRun.objects.filter(pk__in=archive.id_set(ids))
                    doomed._raw_delete(doomed.db)  # attempts are gone: no cascade to collect
            return record
        except _BatchChanged:
            archive.delete_file(written.path)
            # Again, with what is still eligible now (a replayed dead letter no longer is).
            rows = archive.run_values(
                runs.filter(pk__in=archive.id_set(r["id"] for r in rows)).order_by("created_at", "id")
            )
        except BaseException:
            archive.delete_file(written.path)
            raise
    logger.warning("prune of tenant %s day %s: runs kept changing; left for the next pass", tenant.slug, day)
    return None


class _BatchChanged(Exception):
    """A run of the batch changed (or is locked) between reading and deleting it."""


def _unchanged(rows: list[dict], records: list[dict]) -> bool:
    """Lock the batch's rows (skipping any another transaction holds) and check each is as
    written: same status, attempt count and attempts."""
    locked = dict(
        (row[0], row[1:])
        for row in JobRun.objects.select_for_update(skip_locked=True)
        .filter(pk__in=archive.id_set(r["id"] for r in rows))
        .values_list("id", "status", "attempt_count")
    )
    if any(locked.get(r["id"]) != (r["status"], r["attempt_count"]) for r in rows):
        return False
    written_attempts = sum(len(r["attempts"]) for r in records)
    return RunAttempt.objects.filter(run_id__in=archive.id_set(locked)).count() == written_attempts


def _utc_day(moment: datetime):
    return moment.astimezone(UTC).date()


def day_bounds(day) -> tuple[datetime, datetime]:
    start = datetime.combine(day, time.min, tzinfo=UTC)
    return start, start + timedelta(days=1)


def _report(progress: Progress, done: int, total: int) -> None:
    if progress is not None:
        progress(done, total)


class _tenant_lock:
    """A PostgreSQL advisory lock per (what, tenant) for the length of a pass: two prunes of one
    tenant would race for part numbers. Session-level (held across the pass's many short
    transactions). `wait`: block for it (exports) instead of giving up (prunes). Other
    databases (the embedded SQLite) have one writer anyway: always acquired."""

    def __init__(self, what: str, tenant, *, wait: bool = False):
        self.key = f"chime:history:{what}:{tenant.pk}"
        self.wait = wait
        self.acquired = False

    def __enter__(self) -> bool:
        if connection.vendor != "postgresql":
            self.acquired = True
            return True
        function = "pg_advisory_lock" if self.wait else "pg_try_advisory_lock"
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT {function}(hashtextextended(%s, 0))", [self.key])
            row = cursor.fetchone()
        self.acquired = True if self.wait else bool(row[0])
        return self.acquired

    def __exit__(self, *exc) -> None:
        if self.acquired and connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", [self.key])
