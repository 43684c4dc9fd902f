"""One scheduler step, as plain functions over the database.

`scheduler_tick` is what the `run_scheduler` command loops over. Each function is safe to run in
several processes at once: due definitions and releasable runs are taken with
`FOR UPDATE SKIP LOCKED`, runs are inserted under the unique (definition, scheduled_for)
constraint, and a run reaches the broker only through the conditional flip
`scheduled|retrying -> queued`. See docs/architecture.md.
"""

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from uuid6 import uuid7

from apps.delivery.enqueue import publish_runs
from apps.jobs.models import JobDefinition, JobRun, JobStatus, RunStatus, ScheduleType, Trigger
from apps.jobs.services import next_fire_after

logger = logging.getLogger(__name__)

RELEASABLE = (RunStatus.SCHEDULED, RunStatus.RETRYING)


@dataclass
class TickResult:
    materialized: int = 0
    released: int = 0
    requeued: int = 0
    batches: dict[str, int] = field(default_factory=dict)

    @property
    def busy(self) -> bool:
        """True when a batch came back full, so the loop should go again without sleeping."""
        return any(n >= settings.CHIME_SCHEDULER_BATCH_SIZE for n in self.batches.values())


def _in_partitions(queryset, partitions: list[int] | None):
    if partitions is None or len(partitions) >= settings.CHIME_PARTITIONS:
        return queryset
    return queryset.filter(partition__in=partitions)


def materialize_due_runs(*, partitions: list[int] | None, now: datetime, batch_size: int) -> int:
    """Turn one batch of due definitions into runs and advance their `next_fire_at`.

    Returns how many definitions were processed (not how many rows were new: a duplicate insert is
    a no-op, which is what makes two schedulers on one shard harmless).
    """
    with transaction.atomic():
        due = _in_partitions(
            JobDefinition.objects.select_for_update(skip_locked=True).filter(
                status=JobStatus.ACTIVE, next_fire_at__lte=now
            ),
            partitions,
        ).order_by("next_fire_at")[:batch_size]
        definitions = list(due)
        if not definitions:
            return 0
        runs = []
        for definition in definitions:
            occurrence = definition.next_fire_at
            runs.append(
                JobRun(
                    id=uuid7(),
                    tenant_id=definition.tenant_id,
                    definition_id=definition.id,
                    partition=definition.partition,
                    priority=definition.priority,
                    scheduled_for=occurrence,
                    trigger=Trigger.SCHEDULE,
                    status=RunStatus.SCHEDULED,
                    available_at=occurrence,
                )
            )
            definition.last_scheduled_for = occurrence
            if definition.schedule_type == ScheduleType.ONCE:
                definition.next_fire_at = None
                definition.status = JobStatus.COMPLETED
            else:
                definition.next_fire_at = next_fire_after(definition, occurrence)
        JobRun.objects.bulk_create(runs, ignore_conflicts=True)
        JobDefinition.objects.bulk_update(definitions, ["next_fire_at", "status", "last_scheduled_for"])
    return len(definitions)


def release_due_runs(*, partitions: list[int] | None, now: datetime, batch_size: int) -> int:
    """Flip runs whose time has come to `queued` and publish them to their priority's queue."""
    with transaction.atomic():
        rows = list(
            _in_partitions(
                JobRun.objects.select_for_update(skip_locked=True).filter(status__in=RELEASABLE, available_at__lte=now),
                partitions,
            )
            .order_by("available_at")
            .values_list("id", "priority")[:batch_size]
        )
        if not rows:
            return 0
        JobRun.objects.filter(id__in=[run_id for run_id, _ in rows], status__in=RELEASABLE).update(
            status=RunStatus.QUEUED, queued_at=now
        )
    _publish_or_put_back(rows)
    return len(rows)


def _publish_or_put_back(rows: list[tuple]) -> None:
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


def requeue_stale_runs(*, partitions: list[int] | None, now: datetime, batch_size: int) -> int:
    """Publish again runs that sat in `queued` past CHIME_REQUEUE_AFTER (lost message, dead
    scheduler between commit and publish). A duplicate message is harmless: claiming is a
    conditional flip."""
    cutoff = now - settings.CHIME_REQUEUE_AFTER
    with transaction.atomic():
        rows = list(
            _in_partitions(
                JobRun.objects.select_for_update(skip_locked=True).filter(
                    status=RunStatus.QUEUED, queued_at__lt=cutoff
                ),
                partitions,
            ).values_list("id", "priority")[:batch_size]
        )
        if not rows:
            return 0
        JobRun.objects.filter(id__in=[r for r, _ in rows], status=RunStatus.QUEUED).update(queued_at=now)
    _publish_or_put_back(rows)
    return len(rows)


def scheduler_tick(*, partitions: list[int] | None, now: datetime | None = None) -> TickResult:
    now = now or timezone.now()
    batch_size = settings.CHIME_SCHEDULER_BATCH_SIZE
    result = TickResult()
    result.materialized = materialize_due_runs(partitions=partitions, now=now, batch_size=batch_size)
    result.released = release_due_runs(partitions=partitions, now=now, batch_size=batch_size)
    result.batches = {"materialize": result.materialized, "release": result.released}
    return result


def partitions_for_shard(shard: int, shards: int) -> list[int]:
    return [p for p in range(settings.CHIME_PARTITIONS) if p % shards == shard]
