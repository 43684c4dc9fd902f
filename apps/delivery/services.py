"""Claim, send, record: the worker side of a run.

A run is claimed with a conditional flip `queued -> running` that also takes a lease; only the
holder of the lease may record the outcome. A worker that dies stops renewing its leases, and
`recover_expired_leases` (run by the scheduler) makes the run deliverable again, so a run is
delivered at least once and never lost. See docs/architecture.md#delivery-guarantees.

Sending goes through the process's delivery window (apps/delivery/window.py): a Celery task
admits its runs and returns (`admit_runs`); `deliver_runs` admits and waits for its own runs'
outcomes, for callers that need them (tests, benchmarks, eager mode) on the very same path.
"""

import logging
from datetime import datetime

from django.conf import settings
from django.db import connection, transaction
from django.db.models.functions import Now

from apps.core.events import runs_changed_on_commit
from apps.jobs.models import ErrorKind, JobRun, RunAttempt, RunStatus
from apps.jobs.transitions import Event, move

from .outcomes import attempts_left
from .preparing import DeliveryReport, HandBack, build_request, default_payload, worker_id  # noqa: F401 (API)
from .transport import get_transport  # noqa: F401 (bench/stages.py instruments it here)
from .window import Ticket, get_window

logger = logging.getLogger(__name__)

#: A synchronous caller gives up waiting after this long past the longest possible request.
_WAIT_SLACK_SECONDS = 120


def admit_runs(run_ids: list[str]) -> DeliveryReport:
    """What a Celery task does: admit the runs into this process's window and return; blocks
    only while the window is full. Raises HandBack when the message must go back to the broker."""
    return get_window().admit(run_ids)


def deliver_runs(run_ids: list[str]) -> DeliveryReport:
    """Admit the runs and wait until each is settled; returns what happened to them.

    Database errors are ridden out (apps/core/dbretry.py) instead of dropping the runs: the claim
    is retried (or the message handed back), runs claimed but not yet sent are handed back
    without charging an attempt, and outcomes the endpoints already gave are recorded when the
    database returns, never sent again because recording failed.
    """
    ticket = Ticket(run_ids)
    window = get_window()
    window.admit(run_ids, ticket=ticket)
    patience = settings.CHIME_MAX_TIMEOUT_SECONDS + settings.CHIME_WORKER_DB_RETRY_SECONDS + _WAIT_SLACK_SECONDS
    window.serve(ticket, timeout_seconds=patience)
    return ticket.report


def recover_expired_leases(*, partitions: list[int], now: datetime, batch_size: int = 1000) -> int:
    """Runs whose worker died mid-delivery: record the lost attempt, then retry or dead-letter.

    The attempt counter was already raised by the claim, so a job that kills its workers ends
    `failed` after its max attempts instead of cycling forever.
    """
    if not partitions or database_just_started():
        return 0
    with transaction.atomic():
        runs = list(
            JobRun.objects.select_for_update(skip_locked=True, of=("self",))
            .filter(status=RunStatus.RUNNING, lease_expires_at__lt=Now(), partition__in=partitions)
            .select_related("definition")[:batch_size]
        )
        RunAttempt.objects.bulk_create(
            [
                RunAttempt(
                    run_id=run.id,
                    number=run.attempt_count,
                    started_at=run.started_at or now,
                    finished_at=now,
                    error=f"Worker {run.lease_owner} stopped renewing its lease; presumed dead.",
                    error_kind=ErrorKind.WORKER_LOST,
                    worker=run.lease_owner,
                )
                for run in runs
            ],
            ignore_conflicts=True,
        )
        for run in runs:
            if attempts_left(run):
                event, changes = Event.RETRY, {"available_at": now, "status_reason": "Worker lost; retrying."}
            else:
                event, changes = (
                    Event.DEAD_LETTER,
                    {"finished_at": now, "status_reason": "Worker lost on the last attempt."},
                )
            move(event, [run.id], lease_owner="", lease_expires_at=None, **changes)
        runs_changed_on_commit((run.tenant_id, run.id) for run in runs)
    return len(runs)


def database_just_started() -> bool:
    """True for the first lease period after PostgreSQL (re)started. During an outage no worker
    can renew a lease, so leases "expire" although their workers are alive and retrying; give
    them a full lease period to renew (or record) before presuming any of them dead."""
    if connection.vendor != "postgresql":
        return False
    with connection.cursor() as cursor:
        cursor.execute("SELECT now() - pg_postmaster_start_time() < make_interval(secs => %s)", [lease_seconds()])
        return bool(cursor.fetchone()[0])


def lease_seconds() -> float:
    return float(settings.CHIME_RUN_LEASE_SECONDS)
