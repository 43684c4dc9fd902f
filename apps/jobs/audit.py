"""The invariant auditor: selectors that find rows breaking what Chime promises.

`audit()` checks the database as it is, while schedulers and workers keep writing to it, and
returns one `Violation` per broken invariant (the number of offending rows and a few example ids).
`manage.py audit_runs` prints them; every fault test ends by running it. docs/operations.md
("Auditing invariants") says what each invariant means and what to do when it fires.

Each check is one SQL statement, so it sees one consistent snapshot even while others write (a
delivery records its attempt and its run's status in one transaction, a materialization inserts
runs and advances the definition in one). Two kinds of check:

- **State checks** (overdue definitions, runs stuck before delivery) read only rows in a
  non-final state, through the partial indexes the scheduler itself uses (jobdef_due_idx,
  jobrun_due_idx, jobrun_queued_idx, jobrun_running_idx), so they cost the same on a table
  of a billion finished runs. `since` does not narrow them: a run stuck for a week is stuck now.
  Their thresholds are the settings after which Chime itself acts, plus a grace.
- **History checks** (attempts, finish times, duplicates) read the runs and attempts created
  since `since`. Ids are UUIDv7, whose leading bits are the creation time, so "created since" is a
  range of the primary key (`id >= the smallest UUIDv7 of that millisecond`): the window, not the
  table, bounds the work; `created_at` then filters exactly. Definitions are filtered by `updated_at` (every
  materialization sets it) in one pass over the definitions table (one row per job, not per run).

Not checked, because no cheap query can tell it from legitimate history: a cron definition whose
runs skip an occurrence between two materializations (that needs evaluating each job's cron
expression over its runs, and a schedule change or a resume legitimately restarts the series),
and a `queued` run whose message is lost again after every republish (each republish resets
`queued_at`, so it is never "queued past the requeue time").
"""

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import Count, Exists, F, Max, Min, OuterRef, Q, QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from .models import TERMINAL_RUN_STATUSES, JobDefinition, JobRun, JobStatus, RunAttempt, RunStatus, ScheduleType

DEFAULT_GRACE = timedelta(seconds=30)
DEFAULT_EXAMPLES = 5
# UUIDv7 ids carry the clock of the process that made them (a worker's clock may lag the
# scheduler's): the id range starts this much before `since` so no row created since is missed.
ID_CLOCK_MARGIN = timedelta(hours=1)

RELEASABLE = (RunStatus.SCHEDULED, RunStatus.RETRYING)
DELIVERED = (RunStatus.SUCCEEDED, RunStatus.FAILED)  # ended by a delivery try (or a lost worker)


@dataclass(frozen=True)
class Thresholds:
    """How late something may be before it counts as a violation."""

    definition_overdue: timedelta  # active definition whose next_fire_at passed
    release: timedelta  # scheduled/retrying run whose available_at passed
    queued: timedelta  # queued run since queued_at
    lease: timedelta  # running run since lease_expires_at

    @classmethod
    def from_settings(cls, grace: timedelta = DEFAULT_GRACE) -> "Thresholds":
        """The settings after which Chime itself acts, plus `grace` (slow ticks, clock skew)."""
        misfire = timedelta(seconds=settings.CHIME_MISFIRE_GRACE_SECONDS)
        sweep = timedelta(seconds=settings.CHIME_SWEEP_INTERVAL_SECONDS)
        return cls(
            # Reached later than the misfire grace, an occurrence is "missed": the scheduler is behind.
            definition_overdue=misfire + grace,
            # Release happens on every tick; by the same measure a run this late was not released.
            release=misfire + grace,
            # The sweep publishes a queued run again after CHIME_REQUEUE_AFTER (resetting queued_at).
            queued=settings.CHIME_REQUEUE_AFTER + sweep + grace,
            # The sweep recovers an expired lease on its next pass, but gives a database that just
            # restarted one lease period first (workers could not renew during the outage).
            lease=timedelta(seconds=settings.CHIME_RUN_LEASE_SECONDS) + sweep + grace,
        )

    def as_seconds(self) -> dict[str, float]:
        return {name: getattr(self, name).total_seconds() for name in self.__dataclass_fields__}


@dataclass(frozen=True)
class Scope:
    now: datetime  # the database's clock (leases are written on it)
    thresholds: Thresholds
    since: datetime | None = None  # history checks: rows created (definitions: updated) since; None = all
    tenant_id: object | None = None
    examples: int = DEFAULT_EXAMPLES


@dataclass(frozen=True)
class Invariant:
    key: str
    title: str  # what a violation is, in a few words
    find: Callable[[Scope], QuerySet]  # rows (dicts) breaking it, in example order
    label: Callable[[dict], str] = field(default=lambda row: str(row["id"]))


@dataclass
class Violation:
    invariant: str
    title: str
    count: int
    examples: list[str]

    def as_dict(self) -> dict:
        return {"invariant": self.invariant, "title": self.title, "count": self.count, "examples": self.examples}


def database_now() -> datetime:
    """The database's clock: leases are set and compared on it, so the audit uses it too."""
    if connection.vendor != "postgresql":
        return timezone.now()
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement_timestamp()")
        return cursor.fetchone()[0]


def uuid7_floor(moment: datetime) -> uuid.UUID:
    """The smallest UUIDv7 of `moment`'s millisecond: `id >= this` means "created since"."""
    millis = max(int(moment.timestamp() * 1000), 0)
    return uuid.UUID(int=millis << 80)


def _tenant(scope: Scope, path: str = "tenant_id") -> Q:
    return Q(**{path: scope.tenant_id}) if scope.tenant_id is not None else Q()


def _runs_since(scope: Scope, prefix: str = "") -> Q:
    if scope.since is None:
        return Q()
    return Q(
        **{f"{prefix}id__gte": uuid7_floor(scope.since - ID_CLOCK_MARGIN), f"{prefix}created_at__gte": scope.since}
    )


def _attempts_since(scope: Scope) -> Q:
    return Q(id__gte=uuid7_floor(scope.since - ID_CLOCK_MARGIN)) if scope.since is not None else Q()


# --- State checks ---------------------------------------------------------------------------


def definitions_overdue(scope: Scope) -> QuerySet:
    """Active definitions whose next occurrence passed long ago: nothing materialized it
    (no scheduler holds its partition, or the scheduler is failing or far behind)."""
    cutoff = scope.now - scope.thresholds.definition_overdue
    return (
        JobDefinition.objects.filter(_tenant(scope), status=JobStatus.ACTIVE, next_fire_at__isnull=False)
        .filter(next_fire_at__lt=cutoff)
        .order_by("next_fire_at")
        .values("id")
    )


def runs_not_released(scope: Scope) -> QuerySet:
    """`scheduled`/`retrying` runs whose time passed long ago: no scheduler released them."""
    cutoff = scope.now - scope.thresholds.release
    return (
        # attempt_count >= 0 (always true): jobrun_due_idx's planner fence (apps/jobs/models.py).
        JobRun.objects.filter(_tenant(scope), status__in=RELEASABLE, attempt_count__gte=0, available_at__lt=cutoff)
        .order_by("available_at")
        .values("id")
    )


def runs_stuck_queued(scope: Scope) -> QuerySet:
    """`queued` runs the requeue sweep should have published again by now (or never can: no
    queued_at)."""
    cutoff = scope.now - scope.thresholds.queued
    return (
        JobRun.objects.filter(_tenant(scope), status=RunStatus.QUEUED)
        .filter(Q(queued_at__lt=cutoff) | Q(queued_at__isnull=True))
        .order_by(F("queued_at").asc(nulls_first=True))
        .values("id")
    )


def runs_stuck_running(scope: Scope) -> QuerySet:
    """`running` runs whose lease expired and that the sweep did not recover (or never can: no
    lease expiry)."""
    cutoff = scope.now - scope.thresholds.lease
    return (
        JobRun.objects.filter(_tenant(scope), status=RunStatus.RUNNING)
        .filter(Q(lease_expires_at__lt=cutoff) | Q(lease_expires_at__isnull=True))
        .order_by(F("lease_expires_at").asc(nulls_first=True))
        .values("id")
    )


# --- History checks -------------------------------------------------------------------------


def occurrences_without_run(scope: Scope) -> QuerySet:
    """Definitions the scheduler moved past an occurrence that has no run: the high-water mark
    `last_scheduled_for` (always the scheduled_for of a run it inserted in the same transaction),
    or a completed `once` job's `run_at`."""
    runs = JobRun.objects.filter(definition_id=OuterRef("pk"))
    at_high_water = Exists(runs.filter(scheduled_for=OuterRef("last_scheduled_for")))
    at_run_at = Exists(runs.filter(scheduled_for=OuterRef("run_at")))
    updated = Q(updated_at__gte=scope.since) if scope.since is not None else Q()
    return (
        JobDefinition.objects.filter(_tenant(scope), updated)
        .filter(
            Q(Q(last_scheduled_for__isnull=False), ~at_high_water)
            | Q(Q(schedule_type=ScheduleType.ONCE, status=JobStatus.COMPLETED), ~at_run_at)
        )
        .order_by("id")
        .values("id")
    )


def runs_finished_without_attempt(scope: Scope) -> QuerySet:
    """Succeeded or failed runs with no attempt: every delivery outcome, and every lost worker,
    is recorded as an attempt in the same transaction as the run's status."""
    attempts = RunAttempt.objects.filter(run_id=OuterRef("pk"))
    return (
        JobRun.objects.filter(_tenant(scope), _runs_since(scope), status__in=DELIVERED)
        .filter(~Exists(attempts))
        .order_by("id")
        .values("id")
    )


def runs_with_inconsistent_attempts(scope: Scope) -> QuerySet:
    """Runs whose attempts are not numbered 1..attempt_count.

    A claim raises attempt_count and every claimed try is recorded with that number (a try
    handed back unsent lowers it again), so: no number below 1 or above attempt_count, and a
    succeeded or failed run has every number of 1..attempt_count. A run cancelled right after
    its claim may lack the last one (that try was never sent). Runs without any attempt are
    run_without_attempt's finding.
    """
    count = F("run__attempt_count")
    return (
        RunAttempt.objects.filter(_tenant(scope, "run__tenant_id"), _attempts_since(scope), _runs_since(scope, "run__"))
        .values("run_id", "run__status", "run__attempt_count")
        # Distinct numbers: a number recorded twice is duplicate_attempt's finding, not this one's.
        .annotate(n=Count("number", distinct=True), lowest=Min("number"), highest=Max("number"))
        # Distinct numbers within 1..attempt_count cannot outnumber it; a delivered run has them all.
        .filter(Q(lowest__lt=1) | Q(highest__gt=count) | Q(Q(run__status__in=DELIVERED), Q(n__lt=count)))
        .order_by("run_id")
    )


def runs_with_wrong_finished_at(scope: Scope) -> QuerySet:
    """A finished run (succeeded, failed, cancelled, skipped) without finished_at, or an
    unfinished one with it (a replay clears it)."""
    finished = Q(status__in=TERMINAL_RUN_STATUSES)
    return (
        JobRun.objects.filter(_tenant(scope), _runs_since(scope))
        .filter((finished & Q(finished_at__isnull=True)) | (~finished & Q(finished_at__isnull=False)))
        .order_by("id")
        .values("id")
    )


def duplicate_occurrences(scope: Scope) -> QuerySet:
    """More than one run for one (definition, scheduled_for). The unique constraint forbids it;
    this still looks, for a database where a migration or a restore lost the constraint."""
    return (
        JobRun.objects.filter(_tenant(scope), _runs_since(scope))
        .values("definition_id", "scheduled_for")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .order_by("definition_id", "scheduled_for")
    )


def duplicate_attempts(scope: Scope) -> QuerySet:
    """More than one attempt with one (run, number): the unique constraint forbids it too."""
    return (
        RunAttempt.objects.filter(_tenant(scope, "run__tenant_id"), _attempts_since(scope))
        .values("run_id", "number")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .order_by("run_id", "number")
    )


def attempts_without_run(scope: Scope) -> QuerySet:
    """Attempts whose run does not exist. The database has no constraint for it (an attempt is
    inserted only beside its run's update, under its lease: apps/jobs/models.py RunAttempt.run), so
    this looks: a manual delete, or a delete path that forgot the attempts. Such an attempt belongs
    to no tenant: a check scoped to one finds none."""
    if scope.tenant_id is not None:
        return RunAttempt.objects.none().values("id")
    runs = JobRun.objects.filter(pk=OuterRef("run_id"))
    return RunAttempt.objects.filter(_attempts_since(scope)).filter(~Exists(runs)).order_by("id").values("id")


def runs_of_another_tenant(scope: Scope) -> QuerySet:
    """Runs whose tenant is not their job's. A run's tenant is its job's, copied at its insert so
    that every run query is scoped without a join; one that differs would show in the other
    tenant's lists and API (isolation), and no foreign key can refuse it."""
    return (
        JobRun.objects.filter(_tenant(scope), _runs_since(scope))
        .exclude(tenant_id=F("definition__tenant_id"))
        .order_by("id")
        .values("id")
    )


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


INVARIANTS = (
    Invariant("definition_overdue", "due occurrence not materialized", definitions_overdue),
    Invariant("occurrence_without_run", "materialized occurrence without its run", occurrences_without_run),
    Invariant("run_not_released", "scheduled/retrying run not released", runs_not_released),
    Invariant("run_stuck_queued", "queued run past the requeue time", runs_stuck_queued),
    Invariant("run_stuck_running", "running run past its lease", runs_stuck_running),
    Invariant("run_without_attempt", "succeeded/failed run without an attempt", runs_finished_without_attempt),
    Invariant(
        "attempts_inconsistent",
        "attempt numbers not 1..attempt_count",
        runs_with_inconsistent_attempts,
        label=lambda row: (
            f"{row['run_id']} (attempt_count {row['run__attempt_count']}, "
            f"{row['n']} attempts numbered {row['lowest']}..{row['highest']})"
        ),
    ),
    Invariant(
        "finished_at_mismatch",
        "finished run without finished_at (or the reverse)",
        runs_with_wrong_finished_at,
    ),
    Invariant(
        "duplicate_run",
        "more than one run per (definition, scheduled_for)",
        duplicate_occurrences,
        label=lambda row: f"{row['definition_id']}@{iso(row['scheduled_for'])} x{row['n']}",
    ),
    Invariant(
        "duplicate_attempt",
        "more than one attempt per (run, number)",
        duplicate_attempts,
        label=lambda row: f"{row['run_id']}#{row['number']} x{row['n']}",
    ),
    Invariant("attempt_without_run", "attempt whose run does not exist", attempts_without_run),
    Invariant("run_tenant_mismatch", "run whose tenant is not its job's", runs_of_another_tenant),
)


def check(invariant: Invariant, scope: Scope) -> Violation | None:
    """One count (a healthy database answers every check with one cheap query), then examples."""
    rows = invariant.find(scope)
    count = rows.count()
    if not count:
        return None
    examples = [invariant.label(row) for row in rows[: scope.examples]] if scope.examples else []
    return Violation(invariant.key, invariant.title, count, examples)


def audit(scope: Scope) -> list[Violation]:
    """Every broken invariant in `scope`, in INVARIANTS order; empty when all hold."""
    return [violation for invariant in INVARIANTS if (violation := check(invariant, scope))]


DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_since(text: str, *, now: datetime) -> datetime | None:
    """`all` (no bound), a duration back from now (`90s`, `30m`, `1h`, `2d`, `1w`) or an ISO 8601
    date or datetime (naive means UTC). Raises ValueError with a message for humans."""
    text = text.strip()
    if text.lower() == "all":
        return None
    unit = DURATION_UNITS.get(text[-1:].lower())
    if unit and text[:-1].isdigit():
        return now - timedelta(seconds=int(text[:-1]) * unit)
    try:
        moment = parse_datetime(text)
        if moment is None and (day := parse_date(text)) is not None:
            moment = datetime(day.year, day.month, day.day)
    except ValueError:
        moment = None
    if moment is None:
        raise ValueError(
            f"--since {text!r}: expected 'all', a duration like 90s, 30m, 1h, 2d, 1w, "
            "or an ISO 8601 datetime like 2026-11-29T02:00:00Z."
        )
    if timezone.is_naive(moment):
        moment = moment.replace(tzinfo=UTC)
    if moment > now:
        raise ValueError(f"--since {text!r} is in the future (the database clock says {iso(now)}).")
    return moment
