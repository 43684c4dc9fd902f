"""Long-running scheduler process. Only process concerns live here; the work is in services."""

import logging
import signal
import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import close_old_connections
from django.utils import timezone

from apps.core.health import beat, forget_heartbeat
from apps.core.heap import settle
from apps.core.logs import bind
from apps.delivery.services import recover_expired_leases
from apps.metrics.exposition import start_exporter
from apps.scheduler.leases import LeaseKeeper, StepFailures, ensure_lease_rows
from apps.scheduler.services import (
    TickResult,
    partitions_for_shard,
    republish_after_broker_loss,
    requeue_stale_runs,
    scheduler_tick,
)

logger = logging.getLogger("apps.scheduler")


class Command(BaseCommand):
    help = "Run the scheduler: materialize due runs and hand them to workers. Run as many as you like."

    def add_arguments(self, parser):
        parser.add_argument("--shard", type=int, default=None, help="Pin this process to a slice (0-based).")
        parser.add_argument("--shards", type=int, default=None, help="Number of slices.")
        parser.add_argument("--once", action="store_true", help="Run one tick and exit.")

    def handle(self, *args, shard, shards, once, **options):
        if (shard is None) != (shards is None):
            raise CommandError("--shard and --shards go together.")
        if shards is not None and not (1 <= shards <= settings.CHIME_PARTITIONS and 0 <= shard < shards):
            raise CommandError(
                f"Need 1 <= --shards <= {settings.CHIME_PARTITIONS} (CHIME_PARTITIONS) and 0 <= --shard < --shards."
            )
        pinned = shards is not None
        candidates = partitions_for_shard(shard, shards) if pinned else list(range(settings.CHIME_PARTITIONS))

        self.shutdown = False
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        ensure_lease_rows()
        start_exporter()  # CHIME_METRICS_PORT, when set (docs/operations.md#metrics)
        leases = LeaseKeeper(candidates=candidates, pinned=pinned)
        leases.refresh()
        bind(worker=leases.owner)  # every line of this process names the scheduler (LOG_FORMAT=json)
        label = f"shard {shard}/{shards}" if pinned else "unpinned"
        logger.info("scheduler started (%s) as %s, holding %d partitions", label, leases.owner, len(leases.held))
        settle()  # what it loaded, out of the garbage collector's way (apps/core/heap.py)

        self.last_refresh = self.last_sweep = time.monotonic()
        self.lag_ms = 0
        failures = StepFailures.from_settings()
        try:
            while not self.shutdown:
                try:
                    result = self._step(leases)
                except Exception:
                    # A database restart or a network blip must not end the process: log, back
                    # off, go on. Leases that expire meanwhile are simply taken over; after
                    # CHIME_SCHEDULER_MAX_FAILED_STEPS in a row they are handed over at once.
                    logger.exception("scheduler step failed; retrying in 1 s")
                    failures.failed(leases)
                    busy = False
                    time.sleep(1)
                else:
                    failures.succeeded(worked=bool(result.materialized or result.released))
                    busy = result.busy
                    beat("scheduler")  # only a step that worked counts (manage.py probe scheduler)
                if once:
                    break
                if not busy:
                    time.sleep(settings.CHIME_SCHEDULER_IDLE_SECONDS)
        finally:
            forget_heartbeat("scheduler")
            leases.release_all()
            logger.info("scheduler stopped")

    def _step(self, leases: LeaseKeeper) -> TickResult:
        close_old_connections()
        if time.monotonic() - self.last_refresh >= settings.CHIME_LEASE_REFRESH_SECONDS:
            before = set(leases.held)
            leases.refresh(lag_ms=self.lag_ms)
            if set(leases.held) != before:
                logger.info("now holding %d partitions: %s", len(leases.held), leases.partitions)
            self.last_refresh = time.monotonic()
        result = scheduler_tick(leases=leases)
        self.lag_ms = int(result.lag.total_seconds() * 1000)
        if result.materialized or result.released:
            logger.info(
                "tick: materialized %d definitions, released %d runs, lag %d ms",
                result.materialized,
                result.released,
                self.lag_ms,
            )
        if time.monotonic() - self.last_sweep >= settings.CHIME_SWEEP_INTERVAL_SECONDS:
            self._sweep(leases)
            self.last_sweep = time.monotonic()
        return result

    def _sweep(self, leases: LeaseKeeper) -> None:
        now = timezone.now()
        lost = republish_after_broker_loss(partitions=leases.partitions, now=now, batch_size=1000)
        requeued = requeue_stale_runs(partitions=leases.partitions, now=now, batch_size=1000)
        recovered = recover_expired_leases(partitions=leases.partitions, now=now)
        if lost or requeued or recovered:
            logger.info(
                "sweep: published again %d runs lost with the broker and %d stale queued runs, "
                "recovered %d expired leases",
                lost,
                requeued,
                recovered,
            )

    def _on_signal(self, signum, frame):
        self.shutdown = True
