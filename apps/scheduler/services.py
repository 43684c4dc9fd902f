"""One scheduler step, as plain functions over the database.

`scheduler_tick` is what the `run_scheduler` command loops over. Each function is safe to run in
several processes at once: due definitions and releasable runs are taken with
`FOR UPDATE SKIP LOCKED`, runs are inserted under the unique (definition, scheduled_for)
constraint, and a run reaches the broker only through the conditional flip
`scheduled|retrying -> queued`, made inside a transaction that still holds the partition's lease
at the epoch this process acquired it (fencing). See docs/architecture.md.
"""

import logging
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from opentelemetry import trace

from apps.core import tracing
from apps.core.dbretry import with_db_retry
from apps.core.events import runs_changed
from apps.core.ids import uuid7
from apps.delivery.enqueue import broker_epoch, by_priority, publish_runs
from apps.jobs.models import RELEASABLE_DUE_SQL, JobDefinition, JobRun, JobStatus, RunStatus, ScheduleType, Trigger
from apps.jobs.planning import insert_run_rows, plan_definition, run_rows_from_plan
from apps.jobs.transitions import Event, move, picked, release_fenced

from .fairness import fair_selection
from .leases import LeaseKeeper
from .models import SchedulerLease
from .quarantine import ROW_DATA_ERRORS, UNWRITABLE, quarantine_definitions
from .sql import advance_definitions

logger = logging.getLogger(__name__)

RELEASABLE = (RunStatus.SCHEDULED, RunStatus.RETRYING)
PLANNING_FIELDS = (
    "id",
    "tenant_id",
    "partition",
    "priority",
    "schedule_type",
    "cron_expression",
    "timezone",
    "dst_gap",
    "dst_overlap",
    "misfire_policy",
    "catch_up_limit",
    "jitter_seconds",
    "next_fire_at",
    "run_at",
    "status",
)
# Positions in a due-scan row (PLANNING_FIELDS order), for the `once` fast path.
_ID, _TENANT, _PARTITION, _PRIORITY, _TYPE = range(5)
_JITTER, _NEXT_FIRE = PLANNING_FIELDS.index("jitter_seconds"), PLANNING_FIELDS.index("next_fire_at")

# The due-scan on PostgreSQL as one fixed statement: building it with the ORM cost more Python
# than the query took (most ticks find nothing due). jobdef_due_idx is a range scan on
# next_fire_at; the partition filter, when there is one, is applied to the rows it finds.
DUE_SCAN_SQL = """
SELECT {fields} FROM jobs_jobdefinition
 WHERE status = 'active' AND next_fire_at <= %(horizon)s {partition_filter}
 ORDER BY next_fire_at
 LIMIT %(limit)s
 FOR NO KEY UPDATE SKIP LOCKED
"""
PARTITION_FILTER = "AND partition = ANY(%(partitions)s)"


@dataclass
class TickResult:
    materialized: int = 0  # definitions processed
    released: int = 0  # runs handed to the broker
    lag: timedelta = timedelta(0)  # how late the most overdue occurrence was reached

    @property
    def busy(self) -> bool:
        """A batch came back full: go again without sleeping."""
        size = settings.CHIME_SCHEDULER_BATCH_SIZE
        return self.materialized >= size or self.released >= size


def holds_every_partition(partitions: list[int]) -> bool:
    """A scheduler holding all partitions needs no partition filter in its queries."""
    return len(partitions) >= settings.CHIME_PARTITIONS and set(range(settings.CHIME_PARTITIONS)) <= set(partitions)


def due_definitions(*, partitions: list[int], horizon: datetime, batch_size: int) -> list[tuple]:
    """Up to `batch_size` due definitions (PLANNING_FIELDS tuples, oldest first), locked
    FOR NO KEY UPDATE SKIP LOCKED: another scheduler skips them, and the worker's recorder
    (FOR KEY SHARE on the job) is not blocked (docs/architecture.md#lock-order)."""
    if connection.vendor == "postgresql":
        sql = DUE_SCAN_SQL.format(
            fields=", ".join(PLANNING_FIELDS),
            partition_filter="" if holds_every_partition(partitions) else PARTITION_FILTER,
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, {"horizon": horizon, "partitions": partitions, "limit": batch_size})
            return cursor.fetchall()
    return list(
        JobDefinition.objects.select_for_update(skip_locked=True, no_key=True)
        .filter(status=JobStatus.ACTIVE, next_fire_at__lte=horizon, partition__in=partitions)
        .order_by("next_fire_at")
        .values_list(*PLANNING_FIELDS)[:batch_size]
    )


# from_db() takes the loaded fields in the model's field order.
_MODEL_ORDER = [f.attname for f in JobDefinition._meta.concrete_fields if f.attname in PLANNING_FIELDS]
_TO_MODEL_ORDER = [PLANNING_FIELDS.index(name) for name in _MODEL_ORDER]


def as_definition(row: tuple) -> JobDefinition:
    """A due-scan row as a model instance (the other fields deferred), for planning and quarantine."""
    return JobDefinition.from_db("default", _MODEL_ORDER, [row[i] for i in _TO_MODEL_ORDER])


def materialize_due_runs(*, partitions: list[int], now: datetime, batch_size: int) -> tuple[int, timedelta]:
    """Turn one batch of due definitions into runs and advance their `next_fire_at`.

    Returns (definitions processed, worst lag). A duplicate insert is a no-op, which is what makes
    two schedulers on one partition harmless. A definition whose planning raises, or whose runs
    PostgreSQL refuses, is paused with its reason (apps/scheduler/quarantine.py) instead of
    failing the batch.

    A `once` job reached on time and without jitter (the spike's kind) takes a fast path that
    builds its one run row straight from the due-scan tuple: the same row plan_definition would
    give (one run at next_fire_at, the job completed), without a model instance or a Plan.
    Everything else is planned from a model instance, as before.
    """
    if not partitions:
        return 0, timedelta(0)
    horizon = now + timedelta(seconds=settings.CHIME_SCHEDULER_LOOKAHEAD_SECONDS)
    # On time under any policy: the fast path must never decide a misfire.
    on_time_since = now - min(
        timedelta(seconds=settings.CHIME_MISFIRE_GRACE_SECONDS),
        timedelta(seconds=settings.CHIME_MISFIRE_LOOKBACK_SECONDS),
    )
    with transaction.atomic():
        rows = due_definitions(partitions=partitions, horizon=horizon, batch_size=batch_size)
        if not rows:
            return 0, timedelta(0)
        runs, updates, unplannable, lag = [], [], [], timedelta(0)
        for row in rows:
            fire_at = row[_NEXT_FIRE]
            if row[_TYPE] == ScheduleType.ONCE and not row[_JITTER] and fire_at >= on_time_since:
                # RUN_COLUMNS order (apps/jobs/planning.py run_rows_from_plan).
                runs.append(
                    (
                        uuid7(),
                        row[_TENANT],
                        row[_ID],
                        row[_PARTITION],
                        row[_PRIORITY],
                        fire_at,
                        Trigger.SCHEDULE,
                        RunStatus.SCHEDULED,
                        "",
                        fire_at,
                        None,
                        None,
                        None,
                        None,
                    )
                )
                updates.append((row[_ID], None, JobStatus.COMPLETED, fire_at))
                if now > fire_at:
                    lag = max(lag, now - fire_at)
                continue
            definition = as_definition(row)
            # Planning is pure Python: a row that raises is set aside (no savepoint needed, and a
            # try costs nothing on the common path), the rest of the batch goes on.
            mark = len(runs)
            try:
                plan = plan_definition(definition, now=now)
                runs.extend(run_rows_from_plan(definition, plan, now=now))
            except Exception as error:  # any error of one row: quarantine it
                del runs[mark:]  # the rows it yielded before raising
                unplannable.append((definition, error))
                continue
            lag = max(lag, plan.lag)
            last = max((r.scheduled_for for r in plan.runs), default=None)
            status = JobStatus.COMPLETED if plan.completed else JobStatus.ACTIVE
            updates.append((definition.id, plan.next_fire_at, status, last))
        unwritable = write_batch(rows, runs, updates, now=now)
        tracing.link_runs(trace.get_current_span(), (run[0] for run in runs))  # RUN_COLUMNS: id first
        if unplannable:
            quarantine_definitions(unplannable, now=now)
        if unwritable:
            quarantine_definitions(unwritable, now=now, kind=UNWRITABLE)
    return len(rows), lag


def write_batch(rows: list[tuple], runs: list[tuple], updates: list[tuple], *, now: datetime) -> list[tuple]:
    """Insert the batch's runs and advance its definitions inside one savepoint: the common path
    costs two statements more per batch. Only if PostgreSQL refuses a row's data is the batch
    written again row by row, each in its own savepoint, to find the rows it refuses; returns
    those as (definition, error).

    If it refuses every row of a batch of several, the fault is not in the rows: the first error
    is raised (the step fails) rather than quarantining everything."""
    try:
        with transaction.atomic():
            insert_run_rows(runs, now=now)
            advance_definitions(updates, now=now)
        return []
    except ROW_DATA_ERRORS as error:
        batch_error = error
    by_id = {row[_ID]: row for row in rows}
    runs_of = defaultdict(list)
    for row in runs:
        runs_of[row[2]].append(row)  # RUN_COLUMNS: definition_id
    refused = []
    for update in updates:
        try:
            with transaction.atomic():
                insert_run_rows(runs_of[update[0]], now=now)
                advance_definitions([update], now=now)
        except ROW_DATA_ERRORS as error:
            refused.append((as_definition(by_id[update[0]]), error))
    if len(updates) > 1 and len(refused) == len(updates):
        raise batch_error
    return refused


def release_due_runs(*, leases: LeaseKeeper, now: datetime, batch_size: int) -> int:
    """Flip runs whose time has come to `queued` and publish them to their priority's queue,
    fairly across tenants and within each tier's queue budget (apps/scheduler/fairness.py).

    Fencing happens in the flip itself: a run is flipped only if, at the moment of that write
    (`clock_timestamp()`, not the transaction's start), this process still holds its partition's
    lease at the epoch it acquired it. No lease row is locked meanwhile, so a scheduler stalled
    anywhere in here (SIGSTOP, a frozen VM) blocks nobody's takeover, and on resume its flip
    finds the lease gone and releases nothing.
    """
    if not leases.held:
        return 0
    with transaction.atomic():
        partitions = leases.partitions
        if not _anything_due(partitions, now):
            return 0
        chosen = fair_selection(partitions, now=now, batch_size=batch_size)
        if not chosen:
            return 0
        released = flip_to_queued([run_id for run_id, _ in chosen], leases=leases, now=now)
    runs_changed((tenant_id, run_id, RunStatus.QUEUED) for run_id, _, tenant_id in released)
    tracing.link_runs(trace.get_current_span(), (run_id for run_id, _, _ in released))
    publish_or_put_back([(run_id, priority) for run_id, priority, _ in released])
    return len(released)


def flip_to_queued(run_ids: list, *, leases: LeaseKeeper, now: datetime) -> list[tuple]:
    """`scheduled|retrying -> queued` for the runs still releasable, under the fence; returns
    (id, priority, tenant_id) of the runs flipped, ids as text. Rows another scheduler has locked
    are skipped."""
    if not run_ids:
        return []
    if connection.vendor == "postgresql":
        held = sorted(leases.held.items())
        params = {
            "now": now,
            "partitions": [p for p, _ in held],
            "epochs": [e for _, e in held],
            "owner": leases.owner,
        }
        return release_fenced(run_ids, **params)  # the statement: apps/jobs/transitions.py
    # Embedded mode (SQLite serializes writers): check the fence, then flip.
    valid = list(SchedulerLease.objects.filter(leases.fence()).values_list("partition", flat=True))
    released = [
        (str(run_id), priority, str(tenant_id))
        for run_id, priority, tenant_id in JobRun.objects.filter(
            id__in=run_ids, status__in=RELEASABLE, partition__in=valid
        ).values_list("id", "priority", "tenant_id")
    ]
    move(Event.RELEASE, [r[0] for r in released], queued_at=now)
    return released


ANYTHING_DUE_SQL = f"""
SELECT 1 FROM jobs_jobrun
 WHERE {RELEASABLE_DUE_SQL.format(now="%(now)s")} {{partition_filter}}
 LIMIT 1
"""  # noqa: S608 (fixed text, no input)


def _anything_due(partitions: list[int], now: datetime) -> bool:
    """The cheap check first (jobrun_due_idx): most ticks find nothing due. A fixed
    statement on PostgreSQL, like the due-scan: the ORM's query building was most of an idle tick."""
    if connection.vendor == "postgresql":
        sql = ANYTHING_DUE_SQL.format(partition_filter="" if holds_every_partition(partitions) else PARTITION_FILTER)
        with connection.cursor() as cursor:
            cursor.execute(sql, {"now": now, "partitions": partitions})
            return cursor.fetchone() is not None
    return JobRun.objects.filter(status__in=RELEASABLE, available_at__lte=now, partition__in=partitions).exists()


def publish_or_put_back(rows: list[tuple]) -> None:
    for priority, run_ids in by_priority(rows).items():
        try:
            publish_runs(run_ids, priority=priority)
        except Exception:
            # Broker unreachable: hand the runs back so the next tick tries again. If the database
            # fails too, the runs stay `queued` without a message: the broker-epoch check (an
            # empty broker) or the requeue sweep publishes them again.
            logger.warning("publishing %d runs failed; putting them back", len(run_ids), exc_info=True)
            with_db_retry(
                lambda ids=run_ids: move(Event.UNPUBLISH, ids, queued_at=None),
                what="putting back unpublished runs",
                deadline_seconds=30,
            )


def republish_after_broker_loss(*, partitions: list[int], now: datetime, batch_size: int) -> int:
    """Publish again the `queued` runs of these partitions that were queued before the broker's
    current epoch began (apps/delivery/enqueue.py): an empty broker lost their messages. Runs
    published again get `queued_at = now`, so each is published once per lost broker."""
    if not partitions:
        return 0
    epoch = broker_epoch()
    if epoch is None:
        return 0
    total = 0
    while True:
        # Stamped no earlier than the epoch, or the next sweep would find them again (`now` may
        # predate it).
        published = _publish_queued_again(
            partitions=partitions, queued_before=epoch, stamp=max(now, epoch), batch_size=batch_size
        )
        total += published
        if published < batch_size:
            break
    if total:
        logger.warning("the broker lost its messages (empty since %s): published %d queued runs again", epoch, total)
    return total


def requeue_stale_runs(*, partitions: list[int], now: datetime, batch_size: int) -> int:
    """Publish again runs that sat in `queued` past CHIME_REQUEUE_AFTER (a lost message, a
    scheduler that died between commit and publish). A duplicate message is harmless: claiming is
    a conditional flip."""
    if not partitions:
        return 0
    cutoff = now - settings.CHIME_REQUEUE_AFTER
    return _publish_queued_again(partitions=partitions, queued_before=cutoff, stamp=now, batch_size=batch_size)


def _publish_queued_again(*, partitions: list[int], queued_before: datetime, stamp: datetime, batch_size: int) -> int:
    """One batch of `queued` runs queued before `queued_before`: restamp `queued_at`, publish."""
    with transaction.atomic():
        rows = list(
            JobRun.objects.select_for_update(skip_locked=True)
            .filter(status=RunStatus.QUEUED, queued_at__lt=queued_before, partition__in=partitions)
            .values_list("id", "priority")[:batch_size]
        )
        if not rows:
            return 0
        picked([r for r, _ in rows], RunStatus.QUEUED).update(queued_at=stamp)
    publish_or_put_back(rows)
    return len(rows)


def scheduler_tick(*, leases: LeaseKeeper, now: datetime | None = None) -> TickResult:
    now = now or timezone.now()
    batch_size = settings.CHIME_SCHEDULER_BATCH_SIZE
    result = TickResult()
    with tracing.tracer().start_as_current_span("chime.materialize") as span:
        result.materialized, result.lag = materialize_due_runs(
            partitions=leases.partitions, now=now, batch_size=batch_size
        )
        span.set_attribute("chime.definitions", result.materialized)
    with tracing.tracer().start_as_current_span("chime.release") as span:
        result.released = release_due_runs(leases=leases, now=now, batch_size=batch_size)
        span.set_attribute("chime.runs", result.released)
    return result


def partitions_for_shard(shard: int, shards: int) -> list[int]:
    return [p for p in range(settings.CHIME_PARTITIONS) if p % shards == shard]
