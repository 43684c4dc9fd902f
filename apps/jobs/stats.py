"""Overview numbers of one tenant for the dashboard: runs per minute, success rate, fire lag and
queue age over the last hour, per minute.

Counts come from one grouped query. Lag and queue age need per-run timestamps; they are computed
in Python over at most MAX_ROWS of the window's most recent runs (a sample on very busy tenants,
which is what a dashboard needs). Everything works on SQLite (embedded mode) and PostgreSQL.
"""

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.db.models import Count, Q
from django.db.models.functions import TruncMinute

from apps.tenants.models import Tenant

from .models import JobRun, RunStatus, Trigger

WINDOW = timedelta(hours=1)
MAX_ROWS = 20000
MINUTE = timedelta(minutes=1)


@dataclass
class Minute:
    start: datetime
    succeeded: int = 0
    failed: int = 0
    lags: list[float] = field(default_factory=list)
    p95_lag_seconds: float | None = None
    oldest_queued_seconds: float = 0.0

    @property
    def finished(self) -> int:
        return self.succeeded + self.failed

    @property
    def success_rate(self) -> float | None:
        return self.succeeded / self.finished if self.finished else None


@dataclass
class Overview:
    now: datetime
    minutes: list[Minute]
    succeeded: int
    failed: int
    p95_lag_seconds: float | None
    oldest_queued_seconds: float | None  # None: nothing is queued now
    queued_now: int
    sampled: bool  # lag and queue age were computed over the latest MAX_ROWS runs only

    @property
    def finished(self) -> int:
        return self.succeeded + self.failed

    @property
    def runs_per_minute(self) -> float:
        return self.finished / len(self.minutes) if self.minutes else 0.0

    @property
    def success_rate(self) -> float | None:
        return self.succeeded / self.finished if self.finished else None


def percentile(values: list[float], fraction: float) -> float | None:
    """Nearest-rank percentile; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(math.ceil(fraction * len(ordered)) - 1, 0)]


def tenant_overview(*, tenant: Tenant, now: datetime, window: timedelta = WINDOW) -> Overview:
    now = now.astimezone(UTC)
    end = now.replace(second=0, microsecond=0) + MINUTE
    start = end - window
    minutes = [Minute(start=start + i * MINUTE) for i in range(int(window / MINUTE))]
    runs = JobRun.objects.for_tenant(tenant)

    finished = (
        runs.filter(finished_at__gte=start, status__in=[RunStatus.SUCCEEDED, RunStatus.FAILED])
        .annotate(minute=TruncMinute("finished_at", tzinfo=UTC))
        .values("minute", "status")
        .annotate(n=Count("id"))
    )
    for row in finished:
        bucket = _bucket(minutes, start, row["minute"])
        if bucket is not None:
            setattr(bucket, row["status"], getattr(bucket, row["status"]) + row["n"])

    rows = list(
        runs.filter(Q(started_at__gte=start) | Q(queued_at__gte=start) | Q(status=RunStatus.QUEUED))
        .order_by("-created_at")
        .values_list(
            "scheduled_for", "queued_at", "started_at", "finished_at", "status", "attempt_count",
            "attempts_before_replay", "trigger",
        )[:MAX_ROWS]
    )  # fmt: skip
    all_lags = _fire_lags(rows, minutes, start)
    _queue_ages(rows, minutes, now)
    queued_since = [queued_at for _, queued_at, _, _, status, *_ in rows if status == RunStatus.QUEUED and queued_at]
    return Overview(
        now=now,
        minutes=minutes,
        succeeded=sum(m.succeeded for m in minutes),
        failed=sum(m.failed for m in minutes),
        p95_lag_seconds=percentile(all_lags, 0.95),
        oldest_queued_seconds=(now - min(queued_since)).total_seconds() if queued_since else None,
        queued_now=len(queued_since),
        sampled=len(rows) >= MAX_ROWS,
    )


def _bucket(minutes: list[Minute], start: datetime, at: datetime) -> Minute | None:
    index = int((at - start) / MINUTE)
    return minutes[index] if 0 <= index < len(minutes) else None


def _fire_lags(rows, minutes: list[Minute], start: datetime) -> list[float]:
    """started_at - scheduled_for of first attempts (a retry's start says nothing about firing on
    time, and a backfill's occurrences are in the past on purpose). Includes the job's jitter."""
    lags = []
    for scheduled_for, _, started_at, _, _, attempt_count, before_replay, trigger in rows:
        if started_at is None or started_at < start or attempt_count != 1 or before_replay:
            continue
        if trigger == Trigger.BACKFILL:
            continue
        lag = max((started_at - scheduled_for).total_seconds(), 0.0)
        lags.append(lag)
        bucket = _bucket(minutes, start, started_at)
        if bucket is not None:
            bucket.lags.append(lag)
    for minute in minutes:
        minute.p95_lag_seconds = percentile(minute.lags, 0.95)
        minute.lags = []
    return lags


def _queue_ages(rows, minutes: list[Minute], now: datetime) -> None:
    """For the end of each minute, how long the oldest run then in `queued` had been waiting.

    A run is in the queue from queued_at until it started (or finished, if it was cancelled
    there), or still is. Reconstructed from the runs' timestamps, so a run re-queued after a
    retry counts from its latest queued_at.
    """
    spans = []
    for _, queued_at, started_at, finished_at, status, *_ in rows:
        if queued_at is None:
            continue
        if status == RunStatus.QUEUED:
            left = None
        elif started_at is not None and started_at >= queued_at:
            left = started_at
        else:
            left = finished_at or queued_at
        spans.append((queued_at, left))
    spans.sort(key=lambda span: span[0])
    front = 0
    for minute in minutes:
        at = min(minute.start + MINUTE, now)
        # Runs that left the queue by `at` left it by every later minute's end too: skip them for good.
        while front < len(spans) and spans[front][1] is not None and spans[front][1] <= at:
            front += 1
        if front < len(spans) and spans[front][0] <= at:
            minute.oldest_queued_seconds = (at - spans[front][0]).total_seconds()
