"""What to materialize for one due definition: a pure function of the definition and the clock.

The misfire policy decides what happens to occurrences that are *late* (their fire time is more
than CHIME_MISFIRE_GRACE_SECONDS in the past when the scheduler reaches them: after downtime, a
backlog, or a resume). Occurrences that are on time always fire. Every occurrence that does not
fire becomes a `skipped` run with a reason, so "did the 3 a.m. run happen?" always has an answer.
See docs/time-semantics.md#misfires.
"""

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction

from apps.core.events import runs_changed_on_commit
from apps.core.ids import uuid7
from apps.core.prepared import execute_columns

from .models import JobDefinition, JobRun, MisfirePolicy, RunStatus, ScheduleType, Trigger
from .schedules import ScheduleError

# Skipped occurrences past this many become one summary row instead of one row each.
MAX_SKIPPED_ROWS = 1000
# A planning error as told to the tenant (planning_problem): short enough for a status_reason.
MAX_PROBLEM_LENGTH = 380


@dataclass(frozen=True)
class PlannedRun:
    scheduled_for: datetime
    skipped_reason: str = ""  # non-empty: recorded as `skipped`, never delivered
    coalesced_count: int | None = None
    coalesced_first_at: datetime | None = None
    coalesced_last_at: datetime | None = None


@dataclass
class Plan:
    runs: list[PlannedRun] = field(default_factory=list)
    next_fire_at: datetime | None = None
    completed: bool = False  # a `once` job with nothing left to fire
    lag: timedelta = timedelta(0)  # how late the earliest due occurrence was reached


def _late_description(policy: str, count: int) -> str:
    return f"Missed while the scheduler was behind; misfire policy '{policy}'" + (
        f" ({count} occurrences)" if count > 1 else ""
    )


def plan_due(
    definition: JobDefinition,
    *,
    now: datetime,
    lookahead: timedelta,
    grace: timedelta,
    lookback: timedelta,
    pause_reason: str = "",
) -> Plan:
    """Plan the runs of every occurrence from `definition.next_fire_at` up to `now + lookahead`.

    `pause_reason`, when given, is the reason recorded for late occurrences that do not fire
    (used on resume: they were missed because the job was paused).
    """
    first = definition.next_fire_at
    plan = Plan(lag=max(now - first, timedelta(0)))
    horizon = now + lookahead
    if definition.schedule_type == ScheduleType.ONCE:
        occurrences, plan.next_fire_at, plan.completed = [first], None, True
        beyond_lookback: list[datetime] = []
    else:
        schedule = definition.schedule()
        cutoff = now - lookback
        beyond_lookback = []
        if first < cutoff:
            # Do not walk an unbounded past: everything before the lookback window is one row.
            beyond_lookback = [first]
            first = schedule.next_after(cutoff)
        occurrences = []
        at = first
        while at is not None and at <= horizon:
            occurrences.append(at)
            at = schedule.next_after(at)
        plan.next_fire_at = at
    if beyond_lookback:
        plan.runs.append(
            PlannedRun(
                scheduled_for=beyond_lookback[0],
                skipped_reason=f"Missed beyond the {int(lookback.total_seconds() // 3600)} h lookback window.",
                coalesced_first_at=beyond_lookback[0],
                coalesced_last_at=now - lookback,
            )
        )
    if definition.schedule_type == ScheduleType.ONCE and now - occurrences[0] > lookback:
        plan.runs.append(PlannedRun(scheduled_for=occurrences[0], skipped_reason="Missed beyond the lookback window."))
        return plan

    late = [at for at in occurrences if now - at > grace]
    on_time = occurrences[len(late) :]
    policy = definition.misfire_policy
    skipped_reason = pause_reason or _late_description(policy, 1)
    if late and policy == MisfirePolicy.SKIP:
        plan.runs.extend(_skipped_rows(late, skipped_reason))
    elif late and policy == MisfirePolicy.COALESCE:
        if len(late) == 1:
            plan.runs.append(PlannedRun(scheduled_for=late[0]))
        else:
            plan.runs.append(
                PlannedRun(
                    scheduled_for=late[-1],
                    coalesced_count=len(late),
                    coalesced_first_at=late[0],
                    coalesced_last_at=late[-1],
                )
            )
    elif late:  # catch_up
        limit = definition.catch_up_limit
        dropped, kept = late[: max(len(late) - limit, 0)], late[max(len(late) - limit, 0) :]
        plan.runs.extend(_skipped_rows(dropped, pause_reason or f"Beyond catch_up_limit ({limit})."))
        plan.runs.extend(PlannedRun(scheduled_for=at) for at in kept)
    plan.runs.extend(PlannedRun(scheduled_for=at) for at in on_time)
    return plan


def _skipped_rows(occurrences: list[datetime], reason: str) -> list[PlannedRun]:
    if len(occurrences) <= MAX_SKIPPED_ROWS:
        return [PlannedRun(scheduled_for=at, skipped_reason=reason) for at in occurrences]
    head = occurrences[: MAX_SKIPPED_ROWS - 1]
    rest = occurrences[MAX_SKIPPED_ROWS - 1 :]
    return [
        *(PlannedRun(scheduled_for=at, skipped_reason=reason) for at in head),
        PlannedRun(
            scheduled_for=rest[0],
            skipped_reason=f"{reason} ({len(rest)} occurrences summarized in this row)",
            coalesced_count=len(rest),
            coalesced_first_at=rest[0],
            coalesced_last_at=rest[-1],
        ),
    ]


def planning_problem(error: Exception) -> tuple[str, str]:
    """(field, message) for an error raised while planning a definition, for the tenant: the
    scheduler's quarantine reason and the resume path's field error both say it this way.

    A ScheduleError names its field and already reads as a sentence; anything else is named by its
    type, under "schedule" (its text comes from the definition's schedule fields, which hold no
    secrets, and is cut short).
    """
    if isinstance(error, ScheduleError):
        field, text = error.field, error.message
    else:
        lines = str(error).strip().splitlines()  # a database error's first line, not its CONTEXT
        field, text = "schedule", f"{type(error).__name__}: {lines[0] if lines else ''}"
    text = " ".join(str(text).split()) or type(error).__name__
    if len(text) > MAX_PROBLEM_LENGTH:
        text = text[: MAX_PROBLEM_LENGTH - 3] + "..."
    return field, text


def schedule_problem(definition: JobDefinition, *, now: datetime) -> ScheduleError | None:
    """Why the scheduler could not plan this definition now, or None: the same planning the
    scheduler runs, without writing anything. Resuming a job asks first, so that a job the scheduler
    quarantined is not resumed into the same failure."""
    try:
        if definition.schedule_type != ScheduleType.ONCE:
            definition.schedule()
        if definition.next_fire_at is not None:
            list(run_rows_from_plan(definition, plan_definition(definition, now=now), now=now))
    except Exception as error:  # whatever the scheduler would trip over
        field, message = planning_problem(error)
        return ScheduleError(field, message)
    return None


def plan_definition(definition: JobDefinition, *, now: datetime, pause_reason: str = "") -> Plan:
    """`plan_due` with the windows from settings."""
    return plan_due(
        definition,
        now=now,
        lookahead=timedelta(seconds=settings.CHIME_SCHEDULER_LOOKAHEAD_SECONDS),
        grace=timedelta(seconds=settings.CHIME_MISFIRE_GRACE_SECONDS),
        lookback=timedelta(seconds=settings.CHIME_MISFIRE_LOOKBACK_SECONDS),
        pause_reason=pause_reason,
    )


RUN_COLUMNS = (
    "id",
    "tenant_id",
    "definition_id",
    "partition",
    "priority",
    "scheduled_for",
    "trigger",
    "status",
    "status_reason",
    "available_at",
    "finished_at",
    "coalesced_count",
    "coalesced_first_at",
    "coalesced_last_at",
)


def run_rows_from_plan(definition: JobDefinition, plan: Plan, *, now: datetime, trigger: str = Trigger.SCHEDULE):
    """The planned runs as plain rows (RUN_COLUMNS order): the scheduler makes thousands per
    batch, and Django model instances would cost more than the insert itself."""
    offset = definition.jitter_offset
    for planned in plan.runs:
        skipped = bool(planned.skipped_reason)
        yield (
            uuid7(),
            definition.tenant_id,
            definition.id,
            definition.partition,
            definition.priority,
            planned.scheduled_for,
            trigger,
            RunStatus.SKIPPED if skipped else RunStatus.SCHEDULED,
            planned.skipped_reason,
            planned.scheduled_for + offset,
            now if skipped else None,
            planned.coalesced_count,
            planned.coalesced_first_at,
            planned.coalesced_last_at,
        )


INSERT_RUNS_SQL = """
INSERT INTO jobs_jobrun (id, tenant_id, definition_id, partition, priority, scheduled_for, trigger, status,
                         status_reason, available_at, finished_at, coalesced_count, coalesced_first_at,
                         coalesced_last_at, attempt_count, attempts_before_replay, lease_owner, created_at)
SELECT u.*, 0, 0, '', %b
  FROM unnest(%b::uuid[], %b::uuid[], %b::uuid[], %b::smallint[], %b::varchar[], %b::timestamptz[], %b::varchar[],
              %b::varchar[], %b::varchar[], %b::timestamptz[], %b::timestamptz[], %b::integer[], %b::timestamptz[],
              %b::timestamptz[]) AS u
ON CONFLICT (definition_id, scheduled_for) DO NOTHING
"""


def insert_run_rows(rows: list[tuple], *, now: datetime) -> None:
    """Insert runs; an existing (definition, scheduled_for) is left alone: that is the dedupe.

    PostgreSQL: one `INSERT ... SELECT FROM unnest(...) ON CONFLICT DO NOTHING` with the arrays
    sent in binary (a server-side-binding cursor on Django's connection, so inside its
    transaction). Elsewhere: bulk_create.
    """
    if not rows:
        return
    # (tenant_id, id, status): RUN_COLUMNS. A new run's id as text by str(): it is seen here once, and
    # through apps/core/ids.py's cache it would cost a miss and evict the ids that do repeat.
    runs_changed_on_commit((row[1], str(row[0]), row[7]) for row in rows)
    if connection.vendor != "postgresql":
        JobRun.objects.bulk_create(
            [JobRun(**dict(zip(RUN_COLUMNS, row, strict=True)), created_at=now) for row in rows],
            ignore_conflicts=True,
        )
        _count_materialized(len(rows))  # SQLite cannot say which were duplicates: an upper bound
        return
    inserted = execute_columns(INSERT_RUNS_SQL, [now], rows)  # duplicates (ON CONFLICT DO NOTHING) not counted
    _count_materialized(inserted)


def _count_materialized(inserted: int) -> None:
    from apps.metrics.registry import MATERIALIZED

    if inserted > 0:
        transaction.on_commit(lambda: MATERIALIZED.inc(inserted))


def insert_runs(runs: list[JobRun]) -> None:
    """Insert run objects (small batches: resume, backfill); duplicates are left alone."""
    if runs:
        JobRun.objects.bulk_create(runs, ignore_conflicts=True, batch_size=5000)
        runs_changed_on_commit((run.tenant_id, run.id, run.status) for run in runs)
