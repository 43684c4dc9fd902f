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

from apps.core.dbretry import with_db_retry
from apps.core.events import runs_changed
from apps.delivery.enqueue import broker_epoch, by_priority, publish_runs
from apps.jobs.models import JobDefinition, JobRun, JobStatus, RunStatus
from apps.jobs.planning import insert_run_rows, plan_definition, run_rows_from_plan
from apps.jobs.transitions import Event, move, release_fenced

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


def materialize_due_runs(*, partitions: list[int], now: datetime, batch_size: int) -> tuple[int, timedelta]:
    """Turn one batch of due definitions into runs and advance their `next_fire_at`.

    Returns (definitions processed, worst lag). A duplicate insert is a no-op, which is what makes
    two schedulers on one partition harmless. A definition whose planning raises, or whose runs
    PostgreSQL refuses, is paused with its reason (apps/scheduler/quarantine.py) instead of
    failing the batch.
    """
    if not partitions:
        return 0, timedelta(0)
    horizon = now + timedelta(seconds=settings.CHIME_SCHEDULER_LOOKAHEAD_SECONDS)
    with transaction.atomic():
        definitions = list(
            JobDefinition.objects.select_for_update(skip_locked=True, no_key=True)
            .filter(status=JobStatus.ACTIVE, next_fire_at__lte=horizon, partition__in=partitions)
            .order_by("next_fire_at")
            .only(*PLANNING_FIELDS)[:batch_size]
        )
        if not definitions:
            return 0, timedelta(0)
        runs, updates, unplannable, lag = [], [], [], timedelta(0)
        for definition in definitions:
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
        unwritable = write_batch(definitions, runs, updates, now=now)
        if unplannable:
            quarantine_definitions(unplannable, now=now)
        if unwritable:
            quarantine_definitions(unwritable, now=now, kind=UNWRITABLE)
    return len(definitions), lag


def write_batch(definitions: list, runs: list[tuple], updates: list[tuple], *, now: datetime) -> list[tuple]:
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
    by_id = {definition.id: definition for definition in definitions}
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
            refused.append((by_id[update[0]], error))
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
    publish_or_put_back([(run_id, priority) for run_id, priority, _ in released])
    return len(released)


def flip_to_queued(run_ids: list, *, leases: LeaseKeeper, now: datetime) -> list[tuple]:
    """`scheduled|retrying -> queued` for the runs still releasable, under the fence; returns
    (id, priority, tenant_id) of the runs flipped. Rows another scheduler has locked are skipped."""
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
    released = list(
        JobRun.objects.filter(id__in=run_ids, status__in=RELEASABLE, partition__in=valid).values_list(
            "id", "priority", "tenant_id"
        )
    )
    move(Event.RELEASE, [r[0] for r in released], queued_at=now)
    return released


def _anything_due(partitions: list[int], now: datetime) -> bool:
    """The cheap check first (jobrun_releasable_idx): most ticks find nothing due."""
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
        JobRun.objects.filter(id__in=[r for r, _ in rows], status=RunStatus.QUEUED).update(queued_at=stamp)
    publish_or_put_back(rows)
    return len(rows)


def scheduler_tick(*, leases: LeaseKeeper, now: datetime | None = None) -> TickResult:
    now = now or timezone.now()
    batch_size = settings.CHIME_SCHEDULER_BATCH_SIZE
    result = TickResult()
    result.materialized, result.lag = materialize_due_runs(partitions=leases.partitions, now=now, batch_size=batch_size)
    result.released = release_due_runs(leases=leases, now=now, batch_size=batch_size)
    return result


def partitions_for_shard(shard: int, shards: int) -> list[int]:
    return [p for p in range(settings.CHIME_PARTITIONS) if p % shards == shard]
