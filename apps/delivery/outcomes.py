"""What one delivery try means for its run and its job: success, retry with backoff, dead letter,
and the job-level reactions (410 Gone and the circuit breaker pause the job)."""

import logging
import random
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NamedTuple
from uuid import UUID

from django.core.mail import send_mail
from django.db import connection, transaction
from django.db.models import F
from psycopg.types.json import Jsonb

from apps.core import tracing
from apps.core.dbretry import TRANSIENT
from apps.core.events import runs_changed_on_commit
from apps.core.ids import uuid7
from apps.core.logs import log_fields
from apps.jobs.attempt_headers import stored_headers, without_derivable
from apps.jobs.models import ErrorKind, JobDefinition, JobRun, JobStatus, RunAttempt, RunStatus
from apps.jobs.secrets import redact_headers
from apps.jobs.transitions import Event, move, picked, succeed_mine
from apps.tenants.models import Membership, Role

from .sanitize import ERROR_CHARS, RESPONSE_EXCERPT_CHARS, STATUS_REASON_CHARS, clean_headers, clean_integer, clean_text
from .transport import ERROR_INTERRUPTED, WebhookRequest, WebhookResponse

logger = logging.getLogger(__name__)

RETRYABLE_STATUS_CODES = {408, 429}
MAX_RETRY_AFTER = timedelta(days=1)
SIGNATURE_HEADER = "webhook-signature"


@dataclass(frozen=True)
class Verdict:
    succeeded: bool
    retryable: bool
    error_kind: str
    error: str


SUCCESS = Verdict(True, False, "", "")


def classify(response: WebhookResponse) -> Verdict:
    if response.error_kind == ERROR_INTERRUPTED:
        # Cancelled in flight by a worker shutting down: a lost worker, announced.
        return Verdict(False, True, ErrorKind.WORKER_LOST, response.error or "interrupted")
    if response.error_kind:
        retryable = response.error_kind in (ErrorKind.NETWORK, ErrorKind.TIMEOUT)
        return Verdict(False, retryable, response.error_kind, response.error or response.error_kind)
    code = response.status_code or 0
    if 200 <= code < 300:
        return SUCCESS  # one instance: building a frozen dataclass per success, twice per recording, showed
    retryable = code >= 500 or code in RETRYABLE_STATUS_CODES
    return Verdict(False, retryable, ErrorKind.HTTP, f"HTTP {code}")


def backoff_delay(run: JobRun, retry_after_seconds: float | None) -> timedelta:
    """Exponential backoff with full jitter; a server's Retry-After is a floor."""
    definition = run.definition
    tries = run.attempt_count - run.attempts_before_replay
    ceiling = min(
        definition.retry_max_backoff_seconds, definition.retry_initial_backoff_seconds * 2 ** max(tries - 1, 0)
    )
    delay = timedelta(seconds=random.uniform(0, ceiling))
    if retry_after_seconds is not None:
        delay = max(delay, min(timedelta(seconds=retry_after_seconds), MAX_RETRY_AFTER))
    return delay


def attempts_left(run: JobRun) -> bool:
    return run.attempt_count - run.attempts_before_replay < run.definition.retry_max_attempts


class Attempt(NamedTuple):
    """A RunAttempt row to insert, in ATTEMPT_COLUMNS order: a model instance per attempt cost ~9 µs
    of `Model.__init__` for a row that is only copied into the table (`insert_attempts`)."""

    id: UUID
    run_id: UUID
    number: int
    started_at: datetime
    finished_at: datetime
    status_code: int | None
    error: str
    error_kind: str
    duration_ms: int | None
    response_excerpt: str
    request_headers: dict
    worker: str

    def instance(self) -> RunAttempt:
        return RunAttempt(**self._asdict())


def attempt_row(
    run: JobRun, request: WebhookRequest, response: WebhookResponse, verdict: Verdict, owner: str, *, stripped=False
) -> Attempt:
    """The attempt as stored: every text from the response sanitized and cut (apps/delivery/sanitize.py).
    `stripped` keeps only what Chime itself wrote, for a response whose traces could not be stored."""
    if stripped:
        error = f"{verdict.error_kind or 'http'}: Chime could not store the details of this attempt."
        excerpt, headers = "", {}
    else:
        error, excerpt = verdict.error, response.body_excerpt
        # Less the headers derived from the run and its attempt number (apps/jobs/attempt_headers.py),
        # as build_request made them when it did, and less the signature; then the secrets redacted.
        # Dropping first leaves 3 headers of a run's 10 to redact; the order changes nothing, as
        # none of the derivable headers is ever secret (Chime sets them: CHIME_SET_HEADERS,
        # tests/jobs/test_attempt_headers.py).
        if request.derivable is not None:
            kept = without_derivable(request.headers, request.derivable)
        else:
            kept = stored_headers(
                request.headers,
                run_id=run.id,
                job_id=run.definition_id,
                attempt=run.attempt_count,
                scheduled_for=run.scheduled_for,
            )
        sent = {k: v for k, v in kept.items() if k.lower() != SIGNATURE_HEADER}
        headers = redact_headers(sent, run.definition.secret_header_names)
    return Attempt(
        id=uuid7(),
        run_id=run.id,
        number=run.attempt_count,
        started_at=response.started_at,
        finished_at=response.finished_at,
        status_code=clean_integer(response.status_code),
        error=clean_text(error, ERROR_CHARS),
        error_kind=verdict.error_kind,
        duration_ms=clean_integer(response.duration_ms),
        response_excerpt=clean_text(excerpt, RESPONSE_EXCERPT_CHARS),
        request_headers=clean_headers(headers),
        worker=clean_text(owner, 200),
    )


ATTEMPT_COLUMNS = (
    "id",
    "run_id",
    "number",
    "started_at",
    "finished_at",
    "status_code",
    "error",
    "error_kind",
    "duration_ms",
    "response_excerpt",
    "request_headers",
    "worker",
)


def insert_attempts(attempts: list[Attempt]) -> None:
    """COPY on PostgreSQL: a 12-column multi-row INSERT spends most of its time building and
    parsing the statement. Callers hold the runs' rows locked with their lease, so the attempt
    numbers cannot collide."""
    if not attempts:
        return
    if connection.vendor != "postgresql":
        RunAttempt.objects.bulk_create([a.instance() for a in attempts])
        return
    with connection.cursor() as cursor:
        copy_sql = f"COPY jobs_runattempt ({', '.join(ATTEMPT_COLUMNS)}) FROM STDIN"
        with cursor.cursor.copy(copy_sql) as copy:
            for a in attempts:
                copy.write_row((*a[:10], Jsonb(a.request_headers), a.worker))


def record_outcomes(deliveries: list[tuple], *, owner: str, now: datetime, lock_jobs=None) -> dict[str, int]:
    """Record (run, request, response) triples in a few statements; returns counts per outcome.

    Only runs still `running` under this worker's lease are updated: a run cancelled, replaced or
    recovered by the sweep meanwhile keeps the state it has (its attempt is still recorded).

    One run's failure to record never touches another's: if the batch fails for a reason other than
    a lost connection (which `with_db_retry` rides out for the whole call), each run is recorded in
    a transaction of its own, and a run that fails alone is recorded once more with a stripped
    attempt (no excerpt, no headers, Chime's own error text), so it still ends with an attempt
    instead of being left `running` for the sweep to deliver again.

    `lock_jobs(deliveries)`, if given, runs first in each of those transactions (the lock order:
    apps/delivery/recording.py) and returns the ids of the jobs whose failure counter is not zero,
    or None; each transaction is then a transaction of its own, not a savepoint in the caller's.
    """
    try:
        with transaction.atomic():
            return _record(deliveries, owner=owner, now=now, failing_jobs=_locked(lock_jobs, deliveries))
    except TRANSIENT:
        raise
    except Exception:
        if len(deliveries) == 1:
            return _record_stripped(deliveries[0], owner=owner, now=now)
        logger.exception("recording %d outcomes as one batch failed; recording them run by run", len(deliveries))
    counts: dict[str, int] = defaultdict(int)
    for delivery in deliveries:
        try:
            with transaction.atomic():
                outcome = _record([delivery], owner=owner, now=now, failing_jobs=_locked(lock_jobs, [delivery]))
        except TRANSIENT:
            raise
        except Exception:
            outcome = _record_stripped(delivery, owner=owner, now=now, lock_jobs=lock_jobs)
        for name, n in outcome.items():
            counts[name] += n
    return dict(counts)


def _locked(lock_jobs, deliveries: list[tuple]):
    return lock_jobs(deliveries) if lock_jobs is not None else None


def _record_stripped(delivery: tuple, *, owner: str, now: datetime, lock_jobs=None) -> dict[str, int]:
    run = delivery[0]
    logger.exception(
        "recording the outcome of run %s failed; recording a stripped attempt", run.id, extra=log_fields(run)
    )
    with transaction.atomic():
        failing_jobs = _locked(lock_jobs, [delivery])
        return _record([delivery], owner=owner, now=now, stripped=True, failing_jobs=failing_jobs)


def _observe_on_commit(deliveries: list[tuple], attempts: list[Attempt], mine: set) -> None:
    """Delivery durations and first attempts' fire lag (apps/metrics), once these attempts are
    committed: a batch that rolls back and is recorded again run by run counts once."""
    from apps.metrics.registry import attempts_recorded

    observed = [
        (run.priority, run.tenant_id, a.number, run.scheduled_for, a.started_at, a.duration_ms, a.status_code,
         response.error_kind)
        for (run, _, response), a in zip(deliveries, attempts, strict=True)
        if run.id in mine
    ]  # fmt: skip
    if observed:
        transaction.on_commit(lambda: attempts_recorded(observed))


def _lock_mine(run_ids: list, owner: str) -> set:
    """The runs still `running` under this lease, locked."""
    if not run_ids:
        return set()
    return set(
        picked(run_ids, RunStatus.RUNNING).select_for_update().filter(lease_owner=owner).values_list("id", flat=True)
    )


def _record(
    deliveries: list[tuple], *, owner: str, now: datetime, stripped: bool = False, failing_jobs: set | None = None
) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    verdicts = [classify(response) for _, _, response in deliveries]
    if connection.vendor == "postgresql":
        # The common case in one round trip: the succeeded runs still under this lease are
        # finished by a conditional UPDATE that locks them and says which were ours (RETURNING);
        # only the others (failed, retrying) need reading first, to be judged.
        ok_ids = [run.id for (run, _, _), verdict in zip(deliveries, verdicts, strict=True) if verdict.succeeded]
        finished = succeed_mine(ok_ids, now=now, owner=owner)
        rest = [run.id for (run, _, _), verdict in zip(deliveries, verdicts, strict=True) if not verdict.succeeded]
        mine = finished | _lock_mine(rest, owner)
    else:
        finished = None
        mine = _lock_mine([run.id for run, _, _ in deliveries], owner)
    attempts, succeeded, failed, retrying = [], [], defaultdict(list), []
    jobs_ok, jobs_failed, jobs_gone = set(), defaultdict(int), {}
    for (run, request, response), verdict in zip(deliveries, verdicts, strict=True):
        attempt = attempt_row(run, request, response, verdict, owner, stripped=stripped)
        attempts.append(attempt)
        if run.id not in mine:
            counts["lost_lease"] += 1
            continue
        if verdict.succeeded:
            succeeded.append(run.id)
            jobs_ok.add(run.definition_id)
        elif verdict.retryable and attempts_left(run):
            retrying.append((run, attempt, response))
        else:
            why = "no attempts left" if verdict.retryable else "not retryable"
            failed[f"Attempt {run.attempt_count} failed ({why}): {attempt.error}"].append(run.id)
            jobs_failed[run.definition_id] += 1
        if response.status_code == 410:
            jobs_gone[run.definition_id] = run.definition.target_url
    insert_attempts([a for a in attempts if a.run_id in mine])
    _observe_on_commit(deliveries, attempts, mine)
    for (_, request, response), verdict in zip(deliveries, verdicts, strict=True):
        outcome = "succeeded" if verdict.succeeded else "failed"
        tracing.end_delivery_span(
            request.span, status_code=response.status_code, error_kind=response.error_kind, outcome=outcome,
            end=response.finished_at,
        )  # fmt: skip
        request.span = None  # a batch recorded again run by run ends each span once
    # A run whose lease was lost may already have its attempt recorded by the sweep.
    RunAttempt.objects.bulk_create([a.instance() for a in attempts if a.run_id not in mine], ignore_conflicts=True)
    release = {"lease_owner": "", "lease_expires_at": None}
    if finished is None:  # not finished above (SQLite)
        move(Event.SUCCEED, succeeded, finished_at=now, status_reason="", **release)
    counts[RunStatus.SUCCEEDED] += len(succeeded)
    for reason, ids in failed.items():
        move(Event.DEAD_LETTER, ids, finished_at=now, status_reason=clean_text(reason, STATUS_REASON_CHARS), **release)
        counts[RunStatus.FAILED] += len(ids)
    for run, attempt, response in retrying:
        # A request cut off by a worker's shutdown goes out again at once, not after a backoff.
        interrupted = attempt.error_kind == ErrorKind.WORKER_LOST
        move(
            Event.RETRY,
            [run.id],
            available_at=now if interrupted else now + backoff_delay(run, response.retry_after_seconds),
            status_reason=clean_text(
                f"Attempt {run.attempt_count} failed: {attempt.error}; retrying.", STATUS_REASON_CHARS
            ),
            **release,
        )
    counts[RunStatus.RETRYING] += len(retrying)
    if failing_jobs is not None:
        jobs_ok &= failing_jobs  # only a counter that is not zero needs resetting
    _update_job_health(jobs_ok, jobs_failed, jobs_gone, now=now)
    runs_changed_on_commit((run.tenant_id, run.id) for run, _, _ in deliveries if run.id in mine)
    return {outcome: n for outcome, n in counts.items() if n}


def _update_job_health(jobs_ok: set, jobs_failed: dict, jobs_gone: dict, *, now: datetime) -> None:
    if jobs_ok:
        JobDefinition.objects.filter(id__in=jobs_ok, consecutive_failures__gt=0).update(consecutive_failures=0)
    for job_id, n in jobs_failed.items():
        JobDefinition.objects.filter(id=job_id).update(consecutive_failures=F("consecutive_failures") + n)
    for job_id, url in jobs_gone.items():
        pause_job(job_id, reason=f"Paused: the endpoint answered 410 Gone ({url}).", now=now)
    if not jobs_failed:
        return  # building the breaker's queryset alone cost ~1 ms per recorded batch (issue #12)
    tripped = JobDefinition.objects.filter(
        id__in=list(jobs_failed),
        status=JobStatus.ACTIVE,
        failure_threshold__gt=0,
        consecutive_failures__gte=F("failure_threshold"),
    ).values_list("id", "failure_threshold")
    for job_id, threshold in list(tripped):
        pause_job(job_id, reason=f"Paused by the circuit breaker: {threshold} runs in a row failed.", now=now)


def pause_job(job_id, *, reason: str, now: datetime) -> None:
    """Pause a job on the endpoint's behalf, record why, and tell the tenant's owners by email."""
    if not JobDefinition.objects.filter(id=job_id, status=JobStatus.ACTIVE).update(
        status=JobStatus.PAUSED, status_reason=reason[:500], paused_at=now
    ):
        return
    job = JobDefinition.objects.select_related("tenant").get(id=job_id)
    emails = list(
        Membership.objects.filter(tenant_id=job.tenant_id, role=Role.OWNER)
        .exclude(user__email="")
        .values_list("user__email", flat=True)
    )
    if emails:
        transaction.on_commit(lambda: _mail_owners(job, reason, emails))


def _mail_owners(job: JobDefinition, reason: str, emails: list[str]) -> None:
    try:
        send_mail(
            subject=f"[Chime] Job '{job.name}' was paused",
            message=f"{reason}\n\nTenant: {job.tenant.slug}\nJob: {job.name} ({job.id})\n"
            "Fix the endpoint, then resume the job (POST /api/v1/jobs/{id}/resume); resuming clears the counter.",
            from_email=None,
            recipient_list=emails,
        )
    except Exception:
        logger.exception("could not email the owners of tenant %s", job.tenant.slug)
