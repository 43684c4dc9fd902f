"""Writes for job definitions and runs. Each public function is one transaction."""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from apps.core.events import runs_changed_on_commit
from apps.tenants import quotas
from apps.tenants.models import Tenant

from .models import LIVE_EXCLUDED, JobDefinition, JobRun, JobStatus, RunStatus, ScheduleType, Trigger
from .planning import insert_run_rows, insert_runs, plan_definition, run_rows_from_plan, schedule_problem
from .transitions import TRANSITIONS, Event, move


def next_fire_after(definition: JobDefinition, after: datetime) -> datetime | None:
    """The first occurrence of a cron definition strictly after `after` (UTC), or None."""
    return definition.schedule().next_after(after)


def initial_next_fire_at(definition: JobDefinition, now: datetime) -> datetime | None:
    if definition.schedule_type == ScheduleType.ONCE:
        return definition.run_at
    return next_fire_after(definition, now)


def _check_job_slot(tenant, *, inserted: int = 0, adding: int = 1) -> None:
    """The tenant's jobs quota (apps/tenants/quotas.py). Completed jobs do not count, paused ones do.

    Call it last in the creating transaction, after the insert (`inserted` = the jobs this
    transaction inserted, counted by the query but not held before): the tenant row lock
    serializes count-and-commit, so it is held for the count and the commit only, not for the
    validation and the insert. Safe against concurrent creates: under READ COMMITTED the count
    runs after the lock was granted, so it sees every create committed before, plus our own rows.
    `tenant`: a Tenant (its cached limits spare a query) or an id."""
    tenant_id = getattr(tenant, "pk", tenant)
    quotas.check_job_count(tenant, current=_live_jobs_locked(tenant_id) - inserted, adding=adding)


# The lock of quotas.lock_tenant and the count, sent as two statements in one round trip: each
# statement of a multi-statement query takes its own snapshot (READ COMMITTED), so the count still
# runs after the lock was granted. One round trip fewer while the lock is held, and no ORM query
# compiled twice per create.
_LOCK_AND_COUNT_SQL = (
    "SELECT 1 FROM tenants_tenant WHERE id = %s FOR NO KEY UPDATE; "
    "SELECT count(*) FROM jobs_jobdefinition WHERE tenant_id = %s AND status NOT IN (%s, %s)"
)


def _live_jobs_locked(tenant_id) -> int:
    """Lock the tenant row (quotas.lock_tenant) and count its jobs that are not deleted or completed."""
    if connection.vendor != "postgresql":  # embedded SQLite: one writer at a time anyway
        quotas.lock_tenant(tenant_id)
        return JobDefinition.objects.filter(tenant_id=tenant_id).exclude(status__in=LIVE_EXCLUDED).count()
    with connection.cursor() as cursor:
        cursor.execute(_LOCK_AND_COUNT_SQL, [tenant_id, tenant_id, *LIVE_EXCLUDED])
        cursor.nextset()
        return cursor.fetchone()[0]


def _check_retry_policy(tenant, fields: dict) -> None:
    quotas.check_retry_policy(
        tenant,
        max_attempts=fields.get("retry_max_attempts", JobDefinition._meta.get_field("retry_max_attempts").default),
        initial_backoff_seconds=fields.get(
            "retry_initial_backoff_seconds", JobDefinition._meta.get_field("retry_initial_backoff_seconds").default
        ),
    )


@transaction.atomic
def job_create(*, tenant: Tenant, enabled: bool = True, **fields) -> JobDefinition:
    """Create a job. `fields` are JobDefinition fields, already validated by the caller.
    Raises QuotaExceeded over the tenant's jobs or retry limits, InvalidSchedule for a `run_at` too far back."""
    now = timezone.now()
    check_run_at(fields.get("schedule_type"), fields.get("run_at"), now=now)
    _check_retry_policy(tenant, fields)
    definition = JobDefinition(tenant=tenant, **fields)
    if definition.schedule_type == ScheduleType.ONCE and definition.run_at is None:
        definition.run_at = now
    definition.status = JobStatus.ACTIVE if enabled else JobStatus.PAUSED
    definition.next_fire_at = initial_next_fire_at(definition, now)
    definition.save()
    _check_job_slot(tenant, inserted=1)  # last: the tenant lock is held for the count and the commit only
    return definition


class JobActionError(Exception):
    """An action that the job's state does not allow (HTTP 409), with a message for humans."""


class InvalidSchedule(JobActionError):
    """The job's stored schedule cannot be evaluated (HTTP 400 on `field`): resuming it would only
    have the scheduler quarantine it again (apps/scheduler/quarantine.py)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"The schedule cannot be evaluated: {message} Edit the schedule, then resume.")
        self.field, self.message = field, message  # `message` alone is the API's field error


class RunAtTooFarBack(InvalidSchedule):
    """A `once` job's `run_at` further back than the misfire lookback (HTTP 400 on `schedule.run_at`)."""

    def __init__(self, message: str):
        JobActionError.__init__(self, message)
        self.field, self.message = "run_at", message


def check_run_at(schedule_type, run_at: datetime | None, *, now: datetime) -> None:
    """A `once` job's instant may be in the past by at most the misfire lookback: such a job fires at
    once (or is skipped under misfire policy `skip`). Further back it could only ever be recorded as
    skipped, "beyond the lookback", so it is refused instead of created to do nothing."""
    if schedule_type != ScheduleType.ONCE or run_at is None:
        return
    lookback = timedelta(seconds=settings.CHIME_MISFIRE_LOOKBACK_SECONDS)
    if run_at < now - lookback:
        hours = int(lookback.total_seconds() // 3600)
        raise RunAtTooFarBack(
            f"More than {hours} h in the past (the misfire lookback): it would never fire. Omit run_at to fire now."
        )


def _cancel_unstarted_runs(*, job: JobDefinition, reason: str, now: datetime) -> int:
    unstarted = TRANSITIONS[Event.CANCEL_UNSTARTED].sources
    ids = list(JobRun.objects.filter(definition=job, status__in=unstarted).values_list("id", flat=True))
    runs_changed_on_commit((job.tenant_id, run_id, RunStatus.CANCELLED) for run_id in ids)
    return move(Event.CANCEL_UNSTARTED, ids, status_reason=reason, finished_at=now)


@transaction.atomic
def job_pause(*, job: JobDefinition) -> JobDefinition:
    """Stop scheduling. Runs already materialized are cancelled by the worker right before sending."""
    job = JobDefinition.objects.select_for_update().get(pk=job.pk)
    if job.status == JobStatus.ACTIVE:
        job.status, job.paused_at, job.status_reason = JobStatus.PAUSED, timezone.now(), "Paused by the API."
        job.save(update_fields=["status", "paused_at", "status_reason", "updated_at"])
    elif job.status != JobStatus.PAUSED:
        raise JobActionError(f"A {job.status} job cannot be paused.")
    return job


@transaction.atomic
def job_resume(*, job: JobDefinition) -> JobDefinition:
    """Schedule again. Occurrences that fell in the pause are handled by the job's misfire policy;
    those that do not fire are recorded as skipped with the reason that the job was paused.
    A schedule the scheduler could not plan (a quarantined job not fixed yet) is refused."""
    job = JobDefinition.objects.select_for_update().get(pk=job.pk)
    if job.status == JobStatus.ACTIVE:
        return job
    if job.status != JobStatus.PAUSED:
        raise JobActionError(f"A {job.status} job cannot be resumed.")
    now = timezone.now()
    problem = schedule_problem(job, now=now)
    if problem is not None:
        raise InvalidSchedule(problem.field, problem.message)
    job.status, job.status_reason, job.paused_at = JobStatus.ACTIVE, "", None
    job.consecutive_failures = 0  # resuming resets the circuit breaker
    if job.next_fire_at is not None and job.next_fire_at <= now:
        plan = plan_definition(job, now=now, pause_reason="Job was paused at the time.")
        insert_run_rows(list(run_rows_from_plan(job, plan, now=now)), now=now)
        job.next_fire_at = plan.next_fire_at
        if plan.completed:
            job.status = JobStatus.COMPLETED
    job.save(
        update_fields=["status", "status_reason", "paused_at", "next_fire_at", "consecutive_failures", "updated_at"]
    )
    return job


def job_trigger(*, job: JobDefinition) -> JobRun:
    """A run now, outside the schedule (fires even if the job is paused: someone asked for it).
    Every trigger counts against the tenant's triggers_per_minute (QuotaExceeded, 429)."""
    if job.status == JobStatus.DELETED:
        raise JobActionError("A deleted job cannot be triggered.")
    quotas.take_trigger(job.tenant_id)
    now = timezone.now()
    run = JobRun.objects.create(
        tenant_id=job.tenant_id,
        definition=job,
        partition=job.partition,
        priority=job.priority,
        scheduled_for=now,
        available_at=now,
        trigger=Trigger.MANUAL,
    )
    runs_changed_on_commit([(run.tenant_id, run.id, run.status)])
    return run


@dataclass(frozen=True)
class BackfillResult:
    created: list[JobRun]
    existing: int


@transaction.atomic
def job_backfill(*, job: JobDefinition, start: datetime, end: datetime) -> BackfillResult:
    """Materialize every occurrence in (start, end]; occurrences that already have a run keep it.

    A paused job is refused: its backfilled runs would be delivered at once, which is not what
    "paused" promises. Resume it first (the job's row is locked, so a pause cannot slip in between)."""
    if job.schedule_type != ScheduleType.CRON:
        raise JobActionError("Backfill needs a cron schedule.")
    job = JobDefinition.objects.select_for_update().get(pk=job.pk)
    if job.status == JobStatus.DELETED:
        raise JobActionError("A deleted job cannot be backfilled.")
    if job.status == JobStatus.PAUSED:
        raise JobActionError(
            "The job is paused: resume it first, then backfill (backfilled runs are delivered at once)."
        )
    limit = quotas.max_backfill_runs(job.tenant_id)
    occurrences = job.schedule().between(start, end, limit + 1)
    quotas.check_backfill_size(job.tenant_id, occurrences=len(occurrences))  # 400 over the limit
    candidates = [
        JobRun(
            tenant_id=job.tenant_id,
            definition=job,
            partition=job.partition,
            priority=job.priority,
            scheduled_for=fire.utc,
            available_at=timezone.now(),
            trigger=Trigger.BACKFILL,
        )
        for fire in occurrences
    ]
    taken = set(
        JobRun.objects.filter(definition=job, scheduled_for__in=[r.scheduled_for for r in candidates]).values_list(
            "scheduled_for", flat=True
        )
    )
    created = [run for run in candidates if run.scheduled_for not in taken]
    insert_runs(created)
    return BackfillResult(created=created, existing=len(candidates) - len(created))


@transaction.atomic
def job_delete(*, job: JobDefinition) -> JobDefinition:
    """Stop the job for good; runs that have not started are cancelled; history is kept."""
    job = JobDefinition.objects.select_for_update().get(pk=job.pk)
    now = timezone.now()
    job.status, job.next_fire_at, job.status_reason = JobStatus.DELETED, None, "Deleted by the API."
    job.save(update_fields=["status", "next_fire_at", "status_reason", "updated_at"])
    _cancel_unstarted_runs(job=job, reason="Job was deleted.", now=now)
    return job


CANCELLABLE_RUN_STATUSES = TRANSITIONS[Event.CANCEL].sources


@transaction.atomic
def run_cancel(*, run: JobRun) -> JobRun:
    """Cancel a run that has not finished. A request already in flight completes, but its outcome
    is not recorded over the cancellation (recording is conditional on the run still running)."""
    run = JobRun.objects.select_for_update().get(pk=run.pk)
    if run.status not in CANCELLABLE_RUN_STATUSES:
        raise JobActionError(f"A {run.status} run cannot be cancelled.")
    move(
        Event.CANCEL,
        [run.pk],
        status_reason="Cancelled by the API.",
        finished_at=timezone.now(),
        lease_owner="",
        lease_expires_at=None,
    )
    run.refresh_from_db()
    runs_changed_on_commit([(run.tenant_id, run.id, run.status)])
    return run


@transaction.atomic
def run_replay(*, run: JobRun) -> JobRun:
    """Send a dead-lettered run again: the same run (same webhook-id), a fresh retry budget, new
    attempts numbered after the old ones."""
    run = JobRun.objects.select_for_update().get(pk=run.pk)
    if run.status != RunStatus.FAILED:
        raise JobActionError(f"Only failed runs can be replayed; this one is {run.status}.")
    _replay([run.pk], now=timezone.now())
    run.refresh_from_db()
    runs_changed_on_commit([(run.tenant_id, run.id, run.status)])
    return run


@transaction.atomic
def runs_replay_failed(*, runs) -> int:
    """Replay every failed run of a (tenant-scoped) queryset; returns how many."""
    now = timezone.now()
    rows = list(runs.filter(status=RunStatus.FAILED).values_list("id", "tenant_id"))
    runs_changed_on_commit((tenant_id, run_id, RunStatus.SCHEDULED) for run_id, tenant_id in rows)
    return _replay([run_id for run_id, _ in rows], now=now)


def _replay(run_ids: list, *, now: datetime) -> int:
    """failed -> scheduled with a fresh retry budget: attempts are counted from here on."""
    return move(
        Event.REPLAY,
        run_ids,
        status_reason="Replayed.",
        available_at=now,
        finished_at=None,
        queued_at=None,
        attempts_before_replay=F("attempt_count"),
    )


RETRY_LIMITED_FIELDS = ("retry_max_attempts", "retry_initial_backoff_seconds")
SCHEDULE_FIELDS = ("schedule_type", "cron_expression", "timezone", "run_at", "dst_gap", "dst_overlap")


@transaction.atomic
def job_update(*, job: JobDefinition, enabled: bool | None = None, **fields) -> JobDefinition:
    """Change a job. `fields` are JobDefinition fields, already validated by the caller.

    A schedule change recomputes `next_fire_at` from now and cancels the runs materialized for the
    old schedule that have not started; `enabled` pauses or resumes.
    """
    job = JobDefinition.objects.select_for_update().get(pk=job.pk)
    if job.status == JobStatus.DELETED:
        raise JobActionError("A deleted job cannot be changed.")
    if any(getattr(job, name) != fields[name] for name in RETRY_LIMITED_FIELDS if name in fields):
        # A lowered limit binds a job when its retry policy changes, not when its name does.
        _check_retry_policy(
            job.tenant_id, {name: fields.get(name, getattr(job, name)) for name in RETRY_LIMITED_FIELDS}
        )
    schedule_changed = any(getattr(job, name) != value for name, value in fields.items() if name in SCHEDULE_FIELDS)
    if schedule_changed:
        check_run_at(
            fields.get("schedule_type", job.schedule_type), fields.get("run_at", job.run_at), now=timezone.now()
        )
    for name, value in fields.items():
        setattr(job, name, value)
    now = timezone.now()
    if schedule_changed:
        if job.schedule_type == ScheduleType.ONCE and job.run_at is None:
            job.run_at = now
        job.next_fire_at = initial_next_fire_at(job, now)
        if job.status == JobStatus.COMPLETED and job.next_fire_at is not None:
            _check_job_slot(job.tenant_id)  # it counts again
            job.status = JobStatus.ACTIVE
        stale = JobRun.objects.filter(
            definition=job, trigger=Trigger.SCHEDULE, status__in=TRANSITIONS[Event.RESCHEDULE].sources
        )
        runs_changed_on_commit(
            (job.tenant_id, run_id, RunStatus.CANCELLED) for run_id in stale.values_list("id", flat=True)
        )
        move(Event.RESCHEDULE, stale, status_reason="The job's schedule changed.", finished_at=now)
    job.save()
    if enabled is False and job.status == JobStatus.ACTIVE:
        job = job_pause(job=job)
    elif enabled is True and job.status == JobStatus.PAUSED:
        job = job_resume(job=job)
    return job
