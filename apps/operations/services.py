"""Bulk operations: start one, run it chunk by chunk, send again the ones whose worker died.

An operation runs as one Celery task (apps/operations/tasks.py) on the `ops` queue. Its work is
cut in chunks; each chunk is one transaction holding the chunk's effect *and* the operation's
progress (`cursor`, `done`, `counts`), fenced by the operation's lease. So a worker killed at
any instant leaves either a whole chunk committed with its progress, or nothing of it: the task
delivered again (the sweep below, or the broker's own redelivery) resumes at `cursor`, and a
chunk committed is never redone. Each chunk's effect is idempotent besides: a replay only moves
runs still `failed`, a backfill keeps the occurrences that have a run.
"""

import logging
import os
import socket
import threading
import time
import uuid
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from apps.delivery.draining import is_draining
from apps.history import services as history
from apps.jobs import selectors
from apps.jobs import services as job_services
from apps.jobs.models import JobDefinition, JobRun
from apps.tenants import quotas

from .models import REQUEUED, Operation, OperationKind

logger = logging.getLogger(__name__)

# An operation never claimed this long after it was created lost its message (a publish that
# failed after the commit): the sweep sends it again. Longer than any honest wait in the queue;
# a duplicate message is harmless anyway (the claim is one conditional UPDATE).
UNCLAIMED_AFTER = timedelta(minutes=10)


class OperationFailed(Exception):
    """The operation cannot go on (the job was paused or deleted, a quota): its error, for humans."""


class OperationBusy(Exception):
    """Another worker holds the operation's lease: this copy of the message has nothing to do."""


class LeaseLost(Exception):
    """The lease lapsed and another worker took the operation over: stop without committing."""


class HandedBack(Exception):
    """The worker is shutting down (SIGTERM): the operation stopped between two chunks and gave
    its lease up; the task hands its message back to the broker, and the next worker resumes."""


# --- start ----------------------------------------------------------------------------------


def operation_start(*, tenant, kind: str, params: dict, created_by: str = "", idempotency_key: str = "") -> Operation:
    """Record the operation and send its task once the transaction commits. `params` are the
    kind's validated parameters in JSON form (apps/api/serializers/operations.py)."""
    operation = Operation.objects.create(
        tenant=tenant,
        kind=kind,
        params=params,
        created_by=created_by,
        idempotency_key=idempotency_key,
        task_id=str(uuid.uuid4()),
    )
    transaction.on_commit(lambda: send(operation))
    return operation


def send(operation: Operation) -> None:
    """Publish the operation's task, under its own task id (one TaskResult row per operation,
    however often it is sent). A failed publish is logged, not raised: the sweep sends it later."""
    from .tasks import run_operation_task

    try:
        run_operation_task.apply_async(args=[str(operation.pk)], task_id=operation.task_id)
    except Exception:
        logger.exception("operation not sent; the ops worker's sweep will send it", extra={"operation": operation.pk})


# --- run ------------------------------------------------------------------------------------


def worker_identity() -> str:
    """A lease owner unique to one execution (host:pid:random): a re-delivery never passes for its predecessor."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _lease_until() -> datetime:
    return timezone.now() + timedelta(seconds=settings.CHIME_OPERATION_LEASE_SECONDS)


def _claim(operation_id, owner: str) -> bool:
    now = timezone.now()
    free = Q(lease_owner__in=["", REQUEUED]) | Q(lease_expires_at__lt=now)
    claimed = Operation.objects.filter(free, pk=operation_id, finished_at=None).update(
        lease_owner=owner, lease_expires_at=_lease_until()
    )
    return claimed == 1


def _fenced(operation_id, owner: str) -> Operation:
    """The operation, locked for this transaction, if `owner` still holds its lease."""
    operation = Operation.objects.select_for_update().filter(pk=operation_id, lease_owner=owner).first()
    if operation is None:
        raise LeaseLost(f"operation {operation_id}: lease lost")
    return operation


def operation_run(operation_id, *, owner: str, pause: float | None = None) -> dict:
    """Run (or resume) the operation to its end; returns its counts, the task's result.

    Raises OperationBusy when another live worker holds it, OperationFailed when it cannot go on
    (then it is finished, and the task's failure is its error)."""
    if not _claim(operation_id, owner):
        operation = Operation.objects.filter(pk=operation_id).first()
        if operation is None or operation.finished_at is not None:
            return operation.counts if operation else {}  # a late duplicate: the same result again
        raise OperationBusy(f"operation {operation_id} is held by {operation.lease_owner}")
    pause = settings.CHIME_OPERATION_CHUNK_PAUSE_SECONDS if pause is None else pause
    try:
        kind = KINDS[Operation.objects.values_list("kind", flat=True).get(pk=operation_id)]
        if isinstance(kind, PassKind):
            return _run_pass(operation_id, owner, kind)
        while True:
            with transaction.atomic():
                operation = _fenced(operation_id, owner)
                kind = KINDS[operation.kind]
                if operation.total is None:
                    operation.total = kind.count(operation)
                more = kind.chunk(operation, settings.CHIME_OPERATION_CHUNK_SIZE)
                if more:
                    operation.lease_expires_at = _lease_until()
                else:
                    operation.total = operation.done  # what there was, once it is all done
                    operation.finished_at, operation.lease_owner, operation.lease_expires_at = timezone.now(), "", None
                operation.save()
            if not more:
                return operation.counts
            if is_draining():
                Operation.objects.filter(pk=operation_id, lease_owner=owner).update(
                    lease_owner=REQUEUED, lease_expires_at=None
                )
                raise HandedBack(f"operation {operation_id}: handed back at {operation.done}/{operation.total}")
            if pause:
                time.sleep(pause)
    except (LeaseLost, HandedBack):
        raise
    except Exception as error:
        _finish_failed(operation_id, owner)
        if isinstance(error, job_services.JobActionError | quotas.QuotaExceeded | ValueError):
            raise OperationFailed(str(error)) from error
        raise


def _run_pass(operation_id, owner: str, kind: "PassKind") -> dict:
    """A kind done in one call of a resumable pass that reports its own progress (apps/history).
    Progress is written as reported, fenced by the lease; a thread keeps the lease while the
    pass is between two reports (a count, a large batch)."""

    def progress(done: int, total: int) -> None:
        moved = Operation.objects.filter(pk=operation_id, lease_owner=owner).update(
            done=done, total=total, lease_expires_at=_lease_until()
        )
        if not moved:
            raise LeaseLost(f"operation {operation_id}: lease lost")

    operation = Operation.objects.select_related("tenant").get(pk=operation_id)
    with _LeaseKeeper(operation_id, owner):
        counts = kind.run(operation, progress)
    with transaction.atomic():
        operation = _fenced(operation_id, owner)
        operation.counts = counts
        operation.total = operation.total or 0
        operation.done = operation.total
        operation.finished_at, operation.lease_owner, operation.lease_expires_at = timezone.now(), "", None
        operation.save()
    return counts


class _LeaseKeeper:
    """Renews the operation's lease every third of CHIME_OPERATION_LEASE_SECONDS from a thread,
    for as long as the block runs: the lease lapses only when the process is gone."""

    def __init__(self, operation_id, owner: str):
        self.operation_id, self.owner = operation_id, owner
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._renew, name="operation-lease", daemon=True)

    def _renew(self) -> None:
        from django.db import connection

        try:
            while not self.stop.wait(settings.CHIME_OPERATION_LEASE_SECONDS / 3):
                Operation.objects.filter(pk=self.operation_id, lease_owner=self.owner).update(
                    lease_expires_at=_lease_until()
                )
        finally:
            connection.close()

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()


def _finish_failed(operation_id, owner: str) -> None:
    Operation.objects.filter(pk=operation_id, lease_owner=owner).update(
        finished_at=timezone.now(), lease_owner="", lease_expires_at=None
    )


# --- recovery -------------------------------------------------------------------------------


def requeue_lapsed(now: datetime | None = None) -> int:
    """Send again every unfinished operation whose worker's lease lapsed (a worker killed or
    lost mid-operation), or that was never claimed long after its creation. Runs in the ops
    worker (config/celery.py, OperationSweep). Returns how many were sent."""
    now = now or timezone.now()
    lapsed = Q(lease_expires_at__lt=now) & ~Q(lease_owner__in=["", REQUEUED])
    lost = Q(lease_owner="", created_at__lt=now - UNCLAIMED_AFTER)
    with transaction.atomic():
        operations = list(Operation.objects.select_for_update(skip_locked=True).filter(lapsed | lost, finished_at=None))
        for operation in operations:
            operation.lease_owner, operation.lease_expires_at = REQUEUED, None
            operation.save(update_fields=["lease_owner", "lease_expires_at"])
            transaction.on_commit(lambda operation=operation: send(operation))
    if operations:
        logger.warning("operations sent again after their worker was lost", extra={"count": len(operations)})
    return len(operations)


# --- kinds ----------------------------------------------------------------------------------


def _when(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


class ReplayKind:
    """Every dead letter (run `failed`) of the tenant matching the filter, in id order: `cursor`
    is the last id done, so a run that fails again after its replay is not replayed twice."""

    @staticmethod
    def candidates(operation: Operation):
        params = operation.params
        return selectors.dead_letters_matching(
            tenant=operation.tenant_id,
            job=params.get("job"),
            scheduled_after=_when(params.get("scheduled_after")),
            scheduled_before=_when(params.get("scheduled_before")),
            error_kind=params.get("error_kind", ""),
            status_code=params.get("status_code"),
        )

    def count(self, operation: Operation) -> int:
        return self.candidates(operation).count()

    def chunk(self, operation: Operation, size: int) -> bool:
        runs = self.candidates(operation)
        if operation.cursor:
            runs = runs.filter(id__gt=operation.cursor)
        ids = list(runs.order_by("id").values_list("id", flat=True)[:size])
        operation.counts.setdefault("replayed", 0)
        if not ids:
            return False
        replayed = job_services.runs_replay_failed(
            runs=JobRun.objects.filter(tenant_id=operation.tenant_id, id__in=ids)
        )
        operation.counts["replayed"] = operation.counts.get("replayed", 0) + replayed
        operation.done += len(ids)
        operation.cursor = str(ids[-1])
        return len(ids) == size


class BackfillKind:
    """Every occurrence of one cron job in (start, end], at most the tenant's max_backfill_runs
    in all, materialized `size` occurrences at a time through job_backfill (which keeps the
    occurrences that have a run: a chunk done twice creates nothing)."""

    @staticmethod
    def job(operation: Operation) -> JobDefinition:
        job = JobDefinition.objects.filter(tenant_id=operation.tenant_id, pk=operation.params["job"]).first()
        if job is None:
            raise job_services.JobActionError("The job no longer exists.")
        return job

    def count(self, operation: Operation) -> int:
        return backfill_occurrences(
            self.job(operation), _when(operation.params["start"]), _when(operation.params["end"])
        )

    def chunk(self, operation: Operation, size: int) -> bool:
        job = self.job(operation)
        start = _when(operation.cursor) or _when(operation.params["start"])
        end = _when(operation.params["end"])
        fires = job.schedule().between(start, end, size)
        operation.counts.setdefault("created", 0)
        operation.counts.setdefault("existing", 0)
        if not fires:
            return False
        result = job_services.job_backfill(job=job, start=start, end=fires[-1].utc)
        operation.counts["created"] = operation.counts.get("created", 0) + len(result.created)
        operation.counts["existing"] = operation.counts.get("existing", 0) + result.existing
        operation.done += len(fires)
        operation.cursor = fires[-1].utc.isoformat()
        return len(fires) == size


def backfill_occurrences(job: JobDefinition, start: datetime, end: datetime) -> int:
    """How many occurrences (start, end] holds; QuotaExceeded (400 on `end`) past max_backfill_runs."""
    limit = quotas.max_backfill_runs(job.tenant_id)
    count = len(job.schedule().between(start, end, limit + 1))
    quotas.check_backfill_size(job.tenant_id, occurrences=count)
    return count


class PassKind:
    """A kind that is one call of apps/history's passes: `run(operation, progress)` -> counts.
    Those passes are resumable (prune) or safe to run again (export), in short transactions of
    their own, so they run outside the chunk loop's transaction (_run_pass)."""

    def run(self, operation: Operation, progress) -> dict:
        raise NotImplementedError


class ExportKind(PassKind):
    """The tenant's runs created in [start, end), archived (kind export) without deleting them.
    Run again after a lost worker, it writes the range anew (further parts); nothing is lost."""

    def run(self, operation: Operation, progress) -> dict:
        start, end = _when(operation.params["start"]), _when(operation.params["end"])
        archives = history.export_runs(tenant=operation.tenant, start=start, end=end, progress=progress)
        return {
            "runs": sum(a.run_count for a in archives),
            "archives": len(archives),
            "bytes": sum(a.bytes for a in archives),
        }


class PruneKind(PassKind):
    """The tenant's retention pass (archive, then delete), with the retention cutoffs as of the
    operation's creation: run again after a lost worker, it resumes where the last batch ended."""

    def run(self, operation: Operation, progress) -> dict:
        result = history.prune_tenant(tenant=operation.tenant, now=operation.created_at, progress=progress)
        if result.skipped_busy:
            raise OperationFailed("Another prune of this tenant is running: start this one again once it ends.")
        return {
            "runs": result.runs,
            "attempts": result.attempts,
            "dead_letters": result.dead_letters,
            "archives": result.archives,
            "bytes": result.bytes,
        }


KINDS = {
    OperationKind.REPLAY: ReplayKind(),
    OperationKind.BACKFILL: BackfillKind(),
    OperationKind.EXPORT: ExportKind(),
    OperationKind.PRUNE: PruneKind(),
}
