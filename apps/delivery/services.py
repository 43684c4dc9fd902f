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
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.db.models.functions import Now
from django.utils import timezone

from apps.core.events import runs_changed, runs_changed_on_commit
from apps.jobs.models import ErrorKind, JobRun, JobStatus, RunAttempt, RunStatus, Trigger
from apps.tenants.selectors import signing_secrets_by_tenant

from .claiming import LeaseRenewer, claim_runs
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


def deliver_runs(run_ids: list[str]) -> DeliveryReport:
    owner = worker_id()
    report = DeliveryReport()
    runs = claim_runs(run_ids, owner=owner, now=timezone.now())
    report.claimed = len(runs)
    to_send = []
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
        report.outcomes[RunStatus.CANCELLED] += 1
    runs_changed((run.tenant_id, run.id, RunStatus.CANCELLED) for run in runs if run not in to_send)
    if not to_send:
        return report
    secrets = signing_secrets_by_tenant(run.tenant_id for run in to_send)
    now = timezone.now()
    requests = [build_request(run, secrets=secrets[run.tenant_id], now=now) for run in to_send]
    transport = get_transport(allow_private_networks=settings.WEBHOOK_ALLOW_PRIVATE_NETWORKS)
    with LeaseRenewer([run.id for run in to_send], owner=owner):
        responses = transport.send_many(requests)
    outcomes = record_outcomes(list(zip(to_send, requests, responses, strict=True)), owner=owner, now=timezone.now())
    for outcome, n in outcomes.items():
        report.outcomes[outcome] += n
    return report


def recover_expired_leases(*, partitions: list[int], now: datetime, batch_size: int = 1000) -> int:
    """Runs whose worker died mid-delivery: record the lost attempt, then retry or dead-letter.

    The attempt counter was already raised by the claim, so a job that kills its workers ends
    `failed` after its max attempts instead of cycling forever.
    """
    if not partitions:
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
