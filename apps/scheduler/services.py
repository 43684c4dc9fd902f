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
from django.db import transaction
from django.utils import timezone

from apps.core.events import runs_changed
from apps.delivery.enqueue import publish_runs
from apps.jobs.models import JobDefinition, JobRun, JobStatus, RunStatus
from apps.jobs.planning import insert_run_rows, plan_definition, run_rows_from_plan

from .fairness import fair_selection
from .leases import LeaseKeeper
from .models import SchedulerLease
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
    two schedulers on one partition harmless.
    """
    if not partitions:
        return 0, timedelta(0)
    horizon = now + timedelta(seconds=settings.CHIME_SCHEDULER_LOOKAHEAD_SECONDS)
    with transaction.atomic():
        definitions = list(
            JobDefinition.objects.select_for_update(skip_locked=True)
            .filter(status=JobStatus.ACTIVE, next_fire_at__lte=horizon, partition__in=partitions)
            .order_by("next_fire_at")
            .only(*PLANNING_FIELDS)[:batch_size]
        )
        if not definitions:
            return 0, timedelta(0)
        runs, updates, lag = [], [], timedelta(0)
        for definition in definitions:
            plan = plan_definition(definition, now=now)
            lag = max(lag, plan.lag)
            runs.extend(run_rows_from_plan(definition, plan, now=now))
            last = max((r.scheduled_for for r in plan.runs), default=None)
            status = JobStatus.COMPLETED if plan.completed else JobStatus.ACTIVE
            updates.append((definition.id, plan.next_fire_at, status, last))
        insert_run_rows(runs, now=now)
        advance_definitions(updates, now=now)
    return len(definitions), lag


def release_due_runs(*, leases: LeaseKeeper, now: datetime, batch_size: int) -> int:
    """Flip runs whose time has come to `queued` and publish them to their priority's queue,
    fairly across tenants and within each tier's queue budget (apps/scheduler/fairness.py).

    The flip happens only for partitions whose lease rows this process still holds at its epoch;
    those rows are locked for the transaction, so a takeover waits for it instead of racing it.
    """
    if not leases.held:
        return 0
    with transaction.atomic():
        held = SchedulerLease.objects.select_for_update().filter(leases.fence())
        valid = list(held.values_list("partition", flat=True))
        if not valid or not _anything_due(valid, now):
            return 0
        chosen = fair_selection(valid, now=now, batch_size=batch_size)
        if not chosen:
            return 0
        released = list(
            JobRun.objects.select_for_update(skip_locked=True)
            .filter(id__in=[run_id for run_id, _ in chosen], status__in=RELEASABLE)
            .values_list("id", "priority", "tenant_id")
        )
        rows = [(run_id, priority) for run_id, priority, _ in released]
        JobRun.objects.filter(id__in=[run_id for run_id, _ in rows]).update(status=RunStatus.QUEUED, queued_at=now)
    runs_changed((tenant_id, run_id, RunStatus.QUEUED) for run_id, _, tenant_id in released)
    publish_or_put_back(rows)
    return len(rows)


def _anything_due(partitions: list[int], now: datetime) -> bool:
    """The cheap check first (jobrun_releasable_idx): most ticks find nothing due."""
    return JobRun.objects.filter(status__in=RELEASABLE, available_at__lte=now, partition__in=partitions).exists()


def publish_or_put_back(rows: list[tuple]) -> None:
    by_priority: dict[str, list[str]] = defaultdict(list)
    for run_id, priority in rows:
        by_priority[priority].append(str(run_id))
    for priority, run_ids in by_priority.items():
        try:
            publish_runs(run_ids, priority=priority)
        except Exception:
            # Broker unreachable: hand the runs back so the next tick tries again.
            logger.exception("publishing %d runs failed; putting them back", len(run_ids))
            JobRun.objects.filter(id__in=run_ids, status=RunStatus.QUEUED).update(
                status=RunStatus.SCHEDULED, queued_at=None
            )


def requeue_stale_runs(*, partitions: list[int], now: datetime, batch_size: int) -> int:
    """Publish again runs that sat in `queued` past CHIME_REQUEUE_AFTER (a lost message, a
    scheduler that died between commit and publish). A duplicate message is harmless: claiming is
    a conditional flip."""
    if not partitions:
        return 0
    cutoff = now - settings.CHIME_REQUEUE_AFTER
    with transaction.atomic():
        rows = list(
            JobRun.objects.select_for_update(skip_locked=True)
            .filter(status=RunStatus.QUEUED, queued_at__lt=cutoff, partition__in=partitions)
            .values_list("id", "priority")[:batch_size]
        )
        if not rows:
            return 0
        JobRun.objects.filter(id__in=[r for r, _ in rows], status=RunStatus.QUEUED).update(queued_at=now)
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
