"""Claiming runs for delivery: the conditional flip `queued -> running`, the run lease, and the
job's concurrency policy. The leases of runs in flight are renewed by the delivery window
(apps/delivery/window.py)."""

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.db.models.functions import Now

from apps.core.events import runs_changed, runs_changed_on_commit
from apps.core.ids import id_text, uuid_text
from apps.jobs.models import ConcurrencyPolicy, JobDefinition, JobRun, RunStatus
from apps.jobs.transitions import Event, claim_free, move, picked, status_fenced

logger = logging.getLogger(__name__)

BUSY = (RunStatus.RUNNING, RunStatus.RETRYING)


def lease_expiry():
    return Now() + timedelta(seconds=settings.CHIME_RUN_LEASE_SECONDS)


def claim_runs(run_ids: list[str], *, owner: str, now: datetime, guarded_jobs: list | None = None) -> list[JobRun]:
    """Take the runs that are still `queued`; the rest were claimed, cancelled or finished elsewhere.

    `guarded_jobs`: the runs' jobs whose concurrency policy is not `allow`, if the caller read them
    already (the window's admission reads each run's job anyway). When it says there are none,
    the runs are claimed by one statement (`claim_free`: lock, flip and read them with their jobs,
    one round trip); whatever that statement did not take (a run taken elsewhere, one this owner
    took already in a try whose COMMIT failed, a job guarded since the caller's read) goes the
    guarded way below, which finds each for what it is. Both in one transaction.
    """
    with transaction.atomic():
        claimed: list[JobRun] = []
        if guarded_jobs is not None and not guarded_jobs and connection.vendor == "postgresql":
            lease = timedelta(seconds=settings.CHIME_RUN_LEASE_SECONDS)
            claimed = claim_free(run_ids, now=now, owner=owner, lease=lease)
            if len(claimed) < len(run_ids):
                taken = {uuid_text(run.id) for run in claimed}
                run_ids = [run_id for run_id in map(id_text, run_ids) if run_id not in taken]
            else:
                run_ids = []  # every one taken: the claim returns a subset of the ids it was given
            guarded_jobs = None
        seen, guarded = [], []
        if run_ids:
            seen, guarded = _claim_guarded(
                run_ids, owner=owner, now=now, guarded_jobs=guarded_jobs, holding_runs=bool(claimed)
            )
    # Claimed runs are running now; the others were skipped by concurrency_policy 'forbid'.
    runs_changed((run.tenant_id, run.id) for run in claimed + seen)
    return claimed + guarded


def _claim_guarded(
    run_ids: list[str], *, owner: str, now: datetime, guarded_jobs: list | None, holding_runs: bool = False
) -> tuple[list, list]:
    """The claim of runs that may belong to guarded jobs; returns (the runs still `queued` it looked
    at, the runs claimed: those plus any this owner had claimed already).

    Jobs whose concurrency policy is not `allow` are claimed under a lock on the job row, so two
    workers cannot both decide that nothing else of that job is running. That lock is taken
    before the runs' (docs/architecture.md#lock-order: job row, then its runs), the order in which
    pause, update and delete take them; the other way round, claim and delete deadlocked.

    A job that became guarded since the caller read `guarded_jobs` is still found below and taken
    only if free (`late`), as for a first read here.
    """
    if guarded_jobs is None:
        guarded_jobs = (
            picked(run_ids, RunStatus.QUEUED)
            .exclude(definition__concurrency_policy=ConcurrencyPolicy.ALLOW)
            .values_list("definition_id", flat=True)
        )
    guarded_jobs = sorted(set(guarded_jobs))
    locked_jobs = set()
    if guarded_jobs:
        locked_jobs = set(
            # After the one-statement claim this transaction holds runs already: waiting for a job
            # row now would invert the lock order, so a busy job is skipped (as `late` below).
            JobDefinition.objects.select_for_update(skip_locked=holding_runs)
            .filter(id__in=guarded_jobs)
            .order_by("id")
            .values_list("id", flat=True)
        )
    mine_or_queued = status_fenced(RunStatus.QUEUED) | (status_fenced(RunStatus.RUNNING) & Q(lease_owner=owner))
    runs = list(
        JobRun.objects.select_for_update(skip_locked=True, of=("self",))
        # Runs already `running` under this very owner were claimed by a try of this call
        # whose COMMIT failed after it happened (apps/core/dbretry.py): they are ours.
        .filter(mine_or_queued, id__in=run_ids)
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
            JobDefinition.objects.select_for_update(skip_locked=True).filter(id__in=late).values_list("id", flat=True)
        )
    free, guarded, replaced = [], [], set()
    for run in runs:
        policy = run.definition.concurrency_policy
        if policy == ConcurrencyPolicy.ALLOW:
            free.append(run)
            continue
        if run.definition_id not in locked_jobs:
            continue
        goes, cancelled = _apply_concurrency_policy(run, policy, now=now)
        replaced |= cancelled
        if goes:
            # `running` at once, so that a later run of the same job in this batch finds it busy
            # (forbid: skipped; replace: this one is cancelled for it).
            _flip([run], owner=owner, now=now)
            guarded.append(run)
    _flip(free, owner=owner, now=now)
    return runs, [run for run in already + guarded if run.id not in replaced] + free


def _flip(runs: list[JobRun], *, owner: str, now: datetime) -> None:
    move(
        Event.CLAIM,
        [r.id for r in runs],
        attempt_count=F("attempt_count") + 1,
        started_at=now,
        lease_owner=owner,
        lease_expires_at=lease_expiry(),
    )
    for run in runs:
        run.status = RunStatus.RUNNING
        run.attempt_count += 1
        run.lease_owner = owner


def _apply_concurrency_policy(run: JobRun, policy: str, *, now: datetime) -> tuple[bool, set]:
    """(whether `run` may go ahead, the ids of the runs it replaced). Called inside the claim
    transaction, with the job row locked."""
    others = JobRun.objects.filter(definition_id=run.definition_id, status__in=BUSY).exclude(id=run.id)
    if policy == ConcurrencyPolicy.FORBID:
        busy = others.values_list("id", "status").first()
        if busy is None:
            return True, set()
        move(
            Event.SKIP,
            [run.id],
            finished_at=now,
            status_reason=f"Skipped: run {busy[0]} of this job was still {busy[1]} (concurrency_policy 'forbid').",
        )
        return False, set()
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
    return True, set(replaced)
