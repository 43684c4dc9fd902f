"""Long-running scheduler process. Only process concerns live here; the work is in services."""

import logging
import signal
import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import close_old_connections
from django.utils import timezone

from apps.delivery.services import recover_expired_leases
from apps.scheduler.services import partitions_for_shard, requeue_stale_runs, scheduler_tick

logger = logging.getLogger("apps.scheduler")


class Command(BaseCommand):
    help = "Run the scheduler: materialize due runs and hand them to workers. Safe to run several."

    def add_arguments(self, parser):
        parser.add_argument("--shard", type=int, default=None, help="This process's shard (0-based).")
        parser.add_argument("--shards", type=int, default=None, help="Total number of shards.")
        parser.add_argument("--once", action="store_true", help="Run one tick and exit (for cron/debugging).")

    def handle(self, *args, shard, shards, once, **options):
        if (shard is None) != (shards is None):
            raise CommandError("--shard and --shards go together.")
        if shards is not None and not (shards >= 1 and 0 <= shard < shards):
            raise CommandError(f"--shard must be in 0..{(shards or 1) - 1} and --shards at least 1.")
        if shards is not None and shards > settings.CHIME_PARTITIONS:
            raise CommandError(f"--shards can be at most CHIME_PARTITIONS ({settings.CHIME_PARTITIONS}).")
        partitions = partitions_for_shard(shard, shards) if shards is not None else None

        self.shutdown = False
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        label = f"shard {shard}/{shards}" if shards is not None else "all partitions"
        logger.info("scheduler started (%s)", label)

        last_sweep = 0.0
        while not self.shutdown:
            close_old_connections()
            result = scheduler_tick(partitions=partitions)
            if time.monotonic() - last_sweep >= settings.CHIME_SWEEP_INTERVAL_SECONDS:
                now = timezone.now()
                requeued = requeue_stale_runs(partitions=partitions, now=now, batch_size=1000)
                recovered = recover_expired_leases(now=now)
                if requeued or recovered:
                    logger.info(
                        "sweep: requeued %d stale queued runs, recovered %d expired leases", requeued, recovered
                    )
                last_sweep = time.monotonic()
            if result.materialized or result.released:
                logger.info("tick: materialized %d definitions, released %d runs", result.materialized, result.released)
            if once:
                break
            if not result.busy:
                time.sleep(settings.CHIME_SCHEDULER_IDLE_SECONDS)
        logger.info("scheduler stopped")

    def _on_signal(self, signum, frame):
        self.shutdown = True
