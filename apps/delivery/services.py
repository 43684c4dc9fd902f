"""Claim, send, record: the worker side of a run.

A run is claimed with a conditional flip `queued -> running` that also takes a lease; only the
holder of the lease may record the outcome. A worker that dies leaves the lease to expire, and
`recover_expired_leases` (run by the scheduler) makes the run deliverable again, so a run is
delivered at least once and never lost. See docs/architecture.md#delivery-guarantees.
"""

import json
import logging
import os
import random
import socket
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from apps.jobs.models import ErrorKind, JobRun, JobStatus, RunAttempt, RunStatus, Trigger
from apps.tenants.selectors import signing_secrets_valid

from .signing import webhook_headers
from .transport import WebhookRequest, WebhookResponse, get_transport

logger = logging.getLogger(__name__)

RETRYABLE_STATUS_CODES = {408, 429}
MAX_RETRY_AFTER = timedelta(days=1)


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class DeliveryReport:
    claimed: int = 0
    outcomes: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def as_dict(self) -> dict:
        return {"claimed": self.claimed, "outcomes": dict(self.outcomes)}


def claim_runs(run_ids: list[str], *, owner: str, now: datetime) -> list[JobRun]:
    """Take the runs that are still `queued`; the rest were claimed, cancelled or finished elsewhere."""
    with transaction.atomic():
        runs = list(
            JobRun.objects.select_for_update(skip_locked=True, of=("self",))
            .filter(id__in=run_ids, status=RunStatus.QUEUED)
            .select_related("definition", "tenant")
        )
        by_timeout: dict[int, list] = defaultdict(list)
        for run in runs:
            by_timeout[run.definition.timeout_seconds].append(run.id)
        for timeout_seconds, ids in by_timeout.items():
            JobRun.objects.filter(id__in=ids, status=RunStatus.QUEUED).update(
                status=RunStatus.RUNNING,
                attempt_count=F("attempt_count") + 1,
                started_at=now,
                lease_owner=owner,
                lease_expires_at=now
                + timedelta(seconds=timeout_seconds)
                + timedelta(seconds=settings.CHIME_LEASE_SLACK_SECONDS),
            )
    for run in runs:
        run.status = RunStatus.RUNNING
        run.attempt_count += 1
    return runs


def _should_send(run: JobRun) -> str | None:
    """Why a claimed run must not be sent after all, or None. Re-checked right before sending."""
    status = run.definition.status
    if status == JobStatus.DELETED:
        return "Job was deleted before delivery."
    if status == JobStatus.PAUSED and run.trigger != Trigger.MANUAL:
        return "Job was paused before delivery."
    return None


def build_request(run: JobRun, *, secrets: list[str], now: datetime) -> WebhookRequest:
    definition = run.definition
    body = definition.target_body
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


def backoff_delay(run: JobRun, retry_after_seconds: float | None) -> timedelta:
    """Exponential backoff with full jitter; a server's Retry-After is a floor."""
    definition = run.definition
    ceiling = min(
        definition.retry_max_backoff_seconds,
        definition.retry_initial_backoff_seconds * 2 ** max(run.attempt_count - 1, 0),
    )
    delay = timedelta(seconds=random.uniform(0, ceiling))
    if retry_after_seconds is not None:
        delay = max(delay, min(timedelta(seconds=retry_after_seconds), MAX_RETRY_AFTER))
    return delay


def classify(response: WebhookResponse) -> tuple[bool, bool, str]:
    """(succeeded, retryable, error kind) of one delivery try."""
    if response.error_kind:
        return False, response.error_kind in (ErrorKind.NETWORK, ErrorKind.TIMEOUT), response.error_kind
    code = response.status_code or 0
    if 200 <= code < 300:
        return True, False, ""
    return False, code >= 500 or code in RETRYABLE_STATUS_CODES, ErrorKind.HTTP


def _error_text(response: WebhookResponse) -> str:
    if response.error:
        return response.error
    return f"HTTP {response.status_code}"


def record_outcome(run: JobRun, request: WebhookRequest, response: WebhookResponse, *, owner: str) -> str:
    succeeded, retryable, error_kind = classify(response)
    now = timezone.now()
    RunAttempt.objects.bulk_create(
        [
            RunAttempt(
                run_id=run.id,
                number=run.attempt_count,
                started_at=response.started_at,
                finished_at=response.finished_at,
                status_code=response.status_code,
                error="" if succeeded else _error_text(response)[:1000],
                error_kind=error_kind,
                duration_ms=response.duration_ms,
                response_excerpt=response.body_excerpt,
                request_headers={k: v for k, v in request.headers.items() if k.lower() != "webhook-signature"},
                worker=owner,
            )
        ],
        ignore_conflicts=True,
    )
    if succeeded:
        changes = {"status": RunStatus.SUCCEEDED, "finished_at": now, "status_reason": ""}
    elif retryable and run.attempt_count < run.definition.retry_max_attempts:
        delay = backoff_delay(run, response.retry_after_seconds)
        changes = {
            "status": RunStatus.RETRYING,
            "available_at": now + delay,
            "status_reason": f"Attempt {run.attempt_count} failed: {_error_text(response)}; retrying.",
        }
    else:
        why = "no attempts left" if retryable else "not retryable"
        changes = {
            "status": RunStatus.FAILED,
            "finished_at": now,
            "status_reason": f"Attempt {run.attempt_count} failed ({why}): {_error_text(response)}",
        }
    updated = JobRun.objects.filter(id=run.id, status=RunStatus.RUNNING, lease_owner=owner).update(
        lease_owner="", lease_expires_at=None, **changes
    )
    return changes["status"] if updated else "lost_lease"


def deliver_runs(run_ids: list[str]) -> DeliveryReport:
    owner = worker_id()
    now = timezone.now()
    report = DeliveryReport()
    runs = claim_runs(run_ids, owner=owner, now=now)
    report.claimed = len(runs)
    to_send = []
    for run in runs:
        reason = _should_send(run)
        if reason:
            JobRun.objects.filter(id=run.id, status=RunStatus.RUNNING, lease_owner=owner).update(
                status=RunStatus.CANCELLED, status_reason=reason, finished_at=now, lease_owner="", lease_expires_at=None
            )
            report.outcomes[RunStatus.CANCELLED] += 1
        else:
            to_send.append(run)
    if not to_send:
        return report
    secrets_by_tenant = {}
    requests = []
    for run in to_send:
        if run.tenant_id not in secrets_by_tenant:
            secrets_by_tenant[run.tenant_id] = signing_secrets_valid(tenant=run.tenant)
        requests.append(build_request(run, secrets=secrets_by_tenant[run.tenant_id], now=timezone.now()))
    transport = get_transport(allow_private_networks=settings.WEBHOOK_ALLOW_PRIVATE_NETWORKS)
    responses = transport.send_many(requests)
    for run, request, response in zip(to_send, requests, responses, strict=True):
        report.outcomes[record_outcome(run, request, response, owner=owner)] += 1
    return report


def recover_expired_leases(*, partitions: list[int], now: datetime, batch_size: int = 1000) -> int:
    """Runs whose worker died mid-delivery: record the lost attempt, then retry or dead-letter.

    The attempt counter was already raised by the claim, so a job that kills its workers ends
    `failed` after max_attempts instead of cycling forever.
    """
    with transaction.atomic():
        runs = list(
            JobRun.objects.select_for_update(skip_locked=True, of=("self",))
            .filter(status=RunStatus.RUNNING, lease_expires_at__lt=now, partition__in=partitions)
            .select_related("definition")[:batch_size]
        )
        for run in runs:
            RunAttempt.objects.bulk_create(
                [
                    RunAttempt(
                        run_id=run.id,
                        number=run.attempt_count,
                        started_at=run.started_at or now,
                        finished_at=now,
                        error=f"Worker {run.lease_owner} stopped answering; its lease expired.",
                        error_kind=ErrorKind.WORKER_LOST,
                        worker=run.lease_owner,
                    )
                ],
                ignore_conflicts=True,
            )
            if run.attempt_count < run.definition.retry_max_attempts:
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
    return len(runs)
