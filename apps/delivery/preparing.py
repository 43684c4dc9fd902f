"""Turning claimed runs into requests, and the bookkeeping around it: which claimed runs must
not be sent after all (job paused or deleted meanwhile), the exact bytes and headers of each
request, runs that cannot be built (failed with their reason, never failing their neighbours),
and handing runs back to the broker without charging an attempt."""

import logging
import os
import socket
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from apps.core import tracing
from apps.core.events import runs_changed
from apps.core.ids import uuid7, uuid_text
from apps.jobs.attempt_headers import derivable_headers, utc_text
from apps.jobs.models import ErrorKind, JobRun, JobStatus, RunAttempt, RunStatus, Trigger
from apps.jobs.targets import body_bytes
from apps.jobs.transitions import Event, move, picked
from apps.tenants.selectors import signing_secrets_by_tenant

from .claiming import lease_expiry
from .enqueue import by_priority, publish_runs
from .signing import webhook_headers
from .transport import WebhookRequest

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
    return _run_event(run, uuid_text(run.id), utc_text(run.scheduled_for))


def _run_event(run: JobRun, run_id: str, scheduled_for: str) -> dict:
    return {
        "type": "chime.run",
        "timestamp": scheduled_for,
        "data": {
            "job_id": uuid_text(run.definition_id),
            "job_name": run.definition.name,
            "run_id": run_id,
            "scheduled_for": scheduled_for,
            "trigger": run.trigger,
        },
    }


def build_request(run: JobRun, *, secrets: list[str], now: datetime) -> WebhookRequest:
    """The exact bytes and headers of one delivery; the signature covers exactly these bytes.

    The run's id and time are turned into text once: `str(UUID)` five times over was ~1.5 % of
    a worker process's CPU in a spike (py-spy --gil, issue #12)."""
    definition = run.definition
    run_id, scheduled_for = uuid_text(run.id), utc_text(run.scheduled_for)
    body = definition.target_body
    if body is None:
        body = _run_event(run, run_id, scheduled_for)
    if definition.target_method == "GET":
        body = None
    payload = b"" if body is None else body_bytes(body)
    headers = dict(definition.target_headers)
    if body is not None and not any(name.lower() == "content-type" for name in headers):
        headers["Content-Type"] = "application/json"
    # Chime's headers that follow from the run; `webhook-id` among them, which the signer sets
    # again to the same value in the same place. Kept with the request for recording its attempt.
    derivable = derivable_headers(
        run_id=run_id, job_id=uuid_text(run.definition_id), attempt=run.attempt_count, scheduled_for=scheduled_for
    )
    headers.update(derivable)
    headers.update(webhook_headers(secrets=secrets, msg_id=run_id, timestamp=now, payload=payload))
    span = tracing.delivery_span(run)
    # W3C trace context: the run is the trace (its id is the trace id), this attempt the parent.
    headers["traceparent"] = tracing.traceparent(run.id, attempt=run.attempt_count, span=span)
    return WebhookRequest(
        key=run_id,
        url=definition.target_url,
        method=definition.target_method,
        headers=headers,
        body=payload,
        timeout_seconds=definition.timeout_seconds,
        span=span,
        derivable=derivable,
    )


class HandBack(Exception):
    """The task's message must go back to the broker: this worker cannot deliver it now
    (shutting down, or the database stayed away past the retry deadline)."""


def delivery_owner() -> str:
    """The lease owner of one delivery call: unique per call, so a claim retried after an
    ambiguous COMMIT can recognise the runs it already took."""
    return f"{worker_id()}:{uuid7().hex[-6:]}"


def cancel_unsendable(runs: list[JobRun], *, owner: str, report: DeliveryReport) -> tuple[list[JobRun], dict]:
    """Cancel the claimed runs whose job was paused or deleted meanwhile; returns the others and
    the signing secrets of their tenants. Safe to repeat."""
    to_send, cancelled = [], []
    for run in runs:
        reason = _why_not_send(run)
        if reason is None:
            to_send.append(run)
            continue
        move(
            Event.ABANDON,
            [run.id],
            where={"lease_owner": owner},
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


def still_mine(runs: list[JobRun], *, owner: str) -> list[JobRun]:
    ids = {run.id for run in runs}
    kept = set(picked(ids, RunStatus.RUNNING).filter(lease_owner=owner).values_list("id", flat=True))
    JobRun.objects.filter(id__in=kept, lease_owner=owner).update(lease_expires_at=lease_expiry())
    return [run for run in runs if run.id in kept]


def hand_back(runs: list[JobRun], *, owner: str) -> None:
    """Runs claimed but not sent go back to `queued` with their attempt uncharged, and are
    published again: another worker takes them at once instead of after a lease."""
    ids = [run.id for run in runs]
    back = list(picked(ids, RunStatus.RUNNING).filter(lease_owner=owner).values_list("id", "priority"))
    move(
        Event.HAND_BACK,
        [r for r, _ in back],
        where={"lease_owner": owner},
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


def fail_unbuildable(run: JobRun, exc: Exception, *, owner: str, now: datetime) -> None:
    """A claimed run whose request cannot be built (headers that are not a mapping, a body that
    cannot be encoded, a timeout out of range): it fails at once with the reason, and an attempt
    says so. Retrying would build the same broken request; its neighbours are sent as usual."""
    error = f"The request could not be built: {type(exc).__name__}: {exc}".replace("\x00", "")[:500]
    with transaction.atomic():
        if not move(
            Event.DEAD_LETTER,
            [run.id],
            where={"lease_owner": owner},
            finished_at=now,
            status_reason=error,
            lease_owner="",
            lease_expires_at=None,
        ):
            return
        RunAttempt.objects.create(
            run_id=run.id,
            number=run.attempt_count,
            started_at=now,
            finished_at=now,
            error=error,
            error_kind=ErrorKind.INVALID_TARGET,
            worker=owner,
        )
    runs_changed([(run.tenant_id, run.id, RunStatus.FAILED)])
