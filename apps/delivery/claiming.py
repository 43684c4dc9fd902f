"""Claiming runs for delivery: the conditional flip `queued -> running`, the run lease, and the
job's concurrency policy. The leases of runs in flight are renewed by the delivery window
(apps/delivery/window.py)."""

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.db.models.functions import Now

from apps.core.events import runs_changed, runs_changed_on_commit
from apps.jobs.models import ConcurrencyPolicy, JobDefinition, JobRun, RunStatus
from apps.jobs.transitions import Event, move

logger = logging.getLogger(__name__)

BUSY = (RunStatus.RUNNING, RunStatus.RETRYING)


def lease_expiry():
    return Now() + timedelta(seconds=settings.CHIME_RUN_LEASE_SECONDS)


def claim_runs(run_ids: list[str], *, owner: str, now: datetime, guarded_jobs: list | None = None) -> list[JobRun]:
    """Take the runs that are still `queued`; the rest were claimed, cancelled or finished elsewhere.

    Jobs whose concurrency policy is not `allow` are claimed under a lock on the job row, so two
    workers cannot both decide that nothing else of that job is running. That lock is taken
    before the runs' (docs/architecture.md#lock-order: job row, then its runs), the order in which
    pause, update and delete take them; the other way round, claim and delete deadlocked.

    `guarded_jobs`: those jobs of the runs, if the caller read them already (the window's
    admission reads each run's job anyway), which saves a statement per claim. A job that became
    guarded since is still found below and taken only if free (`late`), as for a first read here.
    """
    with transaction.atomic():
        if guarded_jobs is None:
            guarded_jobs = (
                JobRun.objects.filter(id__in=run_ids, status=RunStatus.QUEUED)
                .exclude(definition__concurrency_policy=ConcurrencyPolicy.ALLOW)
                .values_list("definition_id", flat=True)
            )
        guarded_jobs = sorted(set(guarded_jobs))
        locked_jobs = set()
        if guarded_jobs:
            locked_jobs = set(
                JobDefinition.objects.select_for_update()
                .filter(id__in=guarded_jobs)
                .order_by("id")
                .values_list("id", flat=True)
            )
        runs = list(
            JobRun.objects.select_for_update(skip_locked=True, of=("self",))
            # Runs already `running` under this very owner were claimed by a try of this call
            # whose COMMIT failed after it happened (apps/core/dbretry.py): they are ours.
            .filter(Q(status=RunStatus.QUEUED) | Q(status=RunStatus.RUNNING, lease_owner=owner), id__in=run_ids)
            .select_related("definition")
            .order_by("scheduled_for")
        )
        already = [run for run in runs if run.status == RunStatus.RUNNING]
        runs = [run for run in runs if run.status == RunStatus.QUEUED]
        late = sorted({r.definition_id for r in runs if r.definition.concurrency_policy != "allow"} - locked_jobs)
        if late:
            # A job whose policy changed to guarded since the first read: waiting for its row now
            # would invert the order, so take it only if free; its runs stay `queued` otherwise
            # (the requeue sweep publishes them again).
            locked_jobs |= set(
                JobDefinition.objects.select_for_update(skip_locked=True)
                .filter(id__in=late)
                .values_list("id", flat=True)
            )
        claimed = []
        for run in runs:
            policy = run.definition.concurrency_policy
            if policy != ConcurrencyPolicy.ALLOW and (
                run.definition_id not in locked_jobs or not _apply_concurrency_policy(run, policy, now=now)
            ):
                continue
            claimed.append(run)
        move(
            Event.CLAIM,
            [r.id for r in claimed],
            attempt_count=F("attempt_count") + 1,
            started_at=now,
            lease_owner=owner,
            lease_expires_at=lease_expiry(),
        )
    for run in claimed:
        run.status = RunStatus.RUNNING
        run.attempt_count += 1
        run.lease_owner = owner
    # Claimed runs are running now; the others were skipped by concurrency_policy 'forbid'.
    runs_changed((run.tenant_id, run.id) for run in runs)
    return already + claimed


def _apply_concurrency_policy(run: JobRun, policy: str, *, now: datetime) -> bool:
    """True if `run` may go ahead. Called inside the claim transaction, with the job row locked."""
    others = JobRun.objects.filter(definition_id=run.definition_id, status__in=BUSY).exclude(id=run.id)
    if policy == ConcurrencyPolicy.FORBID:
        busy = others.values_list("id", "status").first()
        if busy is None:
            return True
        move(
            Event.SKIP,
            [run.id],
            finished_at=now,
            status_reason=f"Skipped: run {busy[0]} of this job was still {busy[1]} (concurrency_policy 'forbid').",
        )
        return False
    replaced = list(others.values_list("id", flat=True))
    runs_changed_on_commit((run.tenant_id, other_id, RunStatus.CANCELLED) for other_id in replaced)
    move(
        Event.REPLACE,
        replaced,
        finished_at=now,
        lease_owner="",
        lease_expires_at=None,
        status_reason=f"Replaced by run {run.id} (concurrency_policy 'replace').",
    )
    return True
