"""Claim, send, record: the worker side of a run.

A run is claimed with a conditional flip `queued -> running` that also takes a lease; only the
holder of the lease may record the outcome. A worker that dies stops renewing its leases, and
`recover_expired_leases` (run by the scheduler) makes the run deliverable again, so a run is
delivered at least once and never lost. See docs/architecture.md#delivery-guarantees.
"""

import json
import logging
import os
import socket
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.db.models.functions import Now
from django.utils import timezone
from uuid6 import uuid7

from apps.core.dbretry import TRANSIENT, with_db_retry
from apps.core.events import runs_changed, runs_changed_on_commit
from apps.jobs.models import ErrorKind, JobRun, JobStatus, RunAttempt, RunStatus, Trigger
from apps.tenants.selectors import signing_secrets_by_tenant

from .claiming import LeaseRenewer, claim_runs, lease_expiry
from .draining import grace_over, is_draining
from .enqueue import by_priority, publish_runs
from .outcomes import attempts_left, record_outcomes
from .signing import webhook_headers
from .transport import WebhookRequest, get_transport

logger = logging.getLogger(__name__)


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class DeliveryReport:
    claimed: int = 0
    outcomes: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def as_dict(self) -> dict:
        return {"claimed": self.claimed, "outcomes": dict(self.outcomes)}


def _why_not_send(run: JobRun) -> str | None:
    """Why a claimed run must not be sent after all, or None. Checked right before sending."""
    status = run.definition.status
    if status == JobStatus.DELETED:
        return "Job was deleted before delivery."
    if status == JobStatus.PAUSED and run.trigger != Trigger.MANUAL:
        return "Job was paused before delivery."
    return None


def default_payload(run: JobRun) -> dict:
    """The body sent when a job has none: a Standard Webhooks style event describing the run."""
    scheduled_for = run.scheduled_for.isoformat().replace("+00:00", "Z")
    return {
        "type": "chime.run",
        "timestamp": scheduled_for,
        "data": {
            "job_id": str(run.definition_id),
            "job_name": run.definition.name,
            "run_id": str(run.id),
            "scheduled_for": scheduled_for,
            "trigger": run.trigger,
        },
    }


def build_request(run: JobRun, *, secrets: list[str], now: datetime) -> WebhookRequest:
    """The exact bytes and headers of one delivery; the signature covers exactly these bytes."""
    definition = run.definition
    body = definition.target_body if definition.target_body is not None else default_payload(run)
    if definition.target_method == "GET":
        body = None
    payload = b"" if body is None else json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    headers = dict(definition.target_headers)
    if body is not None and not any(name.lower() == "content-type" for name in headers):
        headers["Content-Type"] = "application/json"
    headers.update(
        {
            "Idempotency-Key": str(run.id),
            "Chime-Run-Id": str(run.id),
            "Chime-Job-Id": str(definition.id),
            "Chime-Attempt": str(run.attempt_count),
            "Chime-Scheduled-For": run.scheduled_for.isoformat().replace("+00:00", "Z"),
        }
    )
    headers.update(webhook_headers(secrets=secrets, msg_id=str(run.id), timestamp=now, payload=payload))
    return WebhookRequest(
        key=str(run.id),
        url=definition.target_url,
        method=definition.target_method,
        headers=headers,
        body=payload,
        timeout_seconds=definition.timeout_seconds,
    )


class HandBack(Exception):
    """The task's message must go back to the broker: this worker cannot deliver it now
    (shutting down, or the database stayed away past the retry deadline)."""


def delivery_owner() -> str:
    """The lease owner of one delivery call: unique per call, so a claim retried after an
    ambiguous COMMIT can recognise the runs it already took."""
    return f"{worker_id()}:{uuid7().hex[-6:]}"


def deliver_runs(run_ids: list[str]) -> DeliveryReport:
    """Claim, check, sign, send and record one chunk of runs.

    Database errors are ridden out (apps/core/dbretry.py) instead of dropping the runs: the claim
    is retried (or the message handed back), runs claimed but not yet sent are handed back
    without charging an attempt, and outcomes the endpoints already gave are recorded when the
    database returns, never sent again because recording failed.
    """
    if is_draining():
        raise HandBack("worker is shutting down")
    owner = delivery_owner()
    report = DeliveryReport()
    patience = settings.CHIME_WORKER_DB_RETRY_SECONDS
    try:
        runs = with_db_retry(
            lambda: claim_runs(run_ids, owner=owner, now=timezone.now()),
            what="claiming runs",
            deadline_seconds=patience,
        )
    except TRANSIENT as exc:
        raise HandBack("database unavailable while claiming") from exc
    claimed_at = time.monotonic()
    report.claimed = len(runs)
    if not runs:
        return report
    try:
        to_send, secrets = with_db_retry(
            lambda: _cancel_unsendable(runs, owner=owner, report=report),
            what="checking runs",
            deadline_seconds=patience,
        )
        if to_send and time.monotonic() - claimed_at > settings.CHIME_RUN_LEASE_RENEW_SECONDS:
            # Time passed (a database outage): keep only runs whose lease is still ours.
            to_send = with_db_retry(
                lambda: _still_mine(to_send, owner=owner), what="renewing leases", deadline_seconds=10
            )
    except TRANSIENT:
        return report  # the database stayed away: the leases expire and the sweep recovers the runs
    if not to_send:
        return report
    if is_draining():
        _hand_back(to_send, owner=owner)
        report.outcomes["handed_back"] += len(to_send)
        return report
    now = timezone.now()
    requests = [build_request(run, secrets=secrets[run.tenant_id], now=now) for run in to_send]
    transport = get_transport(allow_private_networks=settings.WEBHOOK_ALLOW_PRIVATE_NETWORKS)
    with LeaseRenewer([run.id for run in to_send], owner=owner):
        responses = transport.send_many(requests, abandon=grace_over)
    deliveries = list(zip(to_send, requests, responses, strict=True))
    outcomes = with_db_retry(
        lambda: record_outcomes(deliveries, owner=owner, now=timezone.now()),
        what="recording outcomes",
        deadline_seconds=patience,
    )
    for outcome, n in outcomes.items():
        report.outcomes[outcome] += n
    return report


def _cancel_unsendable(runs: list[JobRun], *, owner: str, report: DeliveryReport) -> tuple[list[JobRun], dict]:
    """Cancel the claimed runs whose job was paused or deleted meanwhile; returns the others and
    the signing secrets of their tenants. Safe to repeat."""
    to_send, cancelled = [], []
    for run in runs:
        reason = _why_not_send(run)
        if reason is None:
            to_send.append(run)
            continue
        JobRun.objects.filter(id=run.id, status=RunStatus.RUNNING, lease_owner=owner).update(
            status=RunStatus.CANCELLED,
            status_reason=reason,
            finished_at=timezone.now(),
            lease_owner="",
            lease_expires_at=None,
        )
        cancelled.append(run)
    if cancelled:
        report.outcomes[RunStatus.CANCELLED] = len(cancelled)  # set, not added: this may be a repeat
    runs_changed((run.tenant_id, run.id, RunStatus.CANCELLED) for run in cancelled)
    secrets = signing_secrets_by_tenant(run.tenant_id for run in to_send) if to_send else {}
    return to_send, secrets


def _still_mine(runs: list[JobRun], *, owner: str) -> list[JobRun]:
    ids = {run.id for run in runs}
    kept = set(
        JobRun.objects.filter(id__in=ids, status=RunStatus.RUNNING, lease_owner=owner).values_list("id", flat=True)
    )
    JobRun.objects.filter(id__in=kept, lease_owner=owner).update(lease_expires_at=lease_expiry())
    return [run for run in runs if run.id in kept]


def _hand_back(runs: list[JobRun], *, owner: str) -> None:
    """Runs claimed but not sent go back to `queued` with their attempt uncharged, and are
    published again: another worker takes them at once instead of after a lease."""
    ids = [run.id for run in runs]
    back = list(
        JobRun.objects.filter(id__in=ids, status=RunStatus.RUNNING, lease_owner=owner).values_list("id", "priority")
    )
    JobRun.objects.filter(id__in=[r for r, _ in back], status=RunStatus.RUNNING, lease_owner=owner).update(
        status=RunStatus.QUEUED,
        attempt_count=F("attempt_count") - 1,
        queued_at=timezone.now(),
        lease_owner="",
        lease_expires_at=None,
    )
    for priority, run_ids in by_priority(back).items():
        try:
            publish_runs(run_ids, priority=priority)
        except Exception:
            logger.warning("could not publish %d handed-back runs; the sweeps will", len(run_ids), exc_info=True)


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
                changes = {"status": RunStatus.RETRYING, "available_at": now, "status_reason": "Worker lost; retrying."}
            else:
                changes = {
                    "status": RunStatus.FAILED,
                    "finished_at": now,
                    "status_reason": "Worker lost on the last attempt.",
                }
            JobRun.objects.filter(id=run.id, status=RunStatus.RUNNING).update(
                lease_owner="", lease_expires_at=None, **changes
            )
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
