"""Handing runs to Celery: one message carries a chunk of run ids, on the queue of its priority.

And noticing when the broker lost what it held. Redis run without persistence (a common
production setup) comes back empty after a restart or a failover: every message it held is gone,
while PostgreSQL still says those runs are `queued`. Celery's `acks_late` cannot help with
messages no worker ever received. So the broker carries a marker key with the time it was first
seen ("broker epoch"); a restarted, empty broker has no marker, the first scheduler to notice sets
a new one, and every scheduler then publishes again the `queued` runs of its partitions that were
queued before that epoch (apps/scheduler/services.py). A broker that kept its data (append-only
file) keeps its marker, and nothing is published twice.
"""

import logging
import time
from collections import defaultdict
from datetime import UTC, datetime

from django.conf import settings

from apps.core.events import shared_client

logger = logging.getLogger(__name__)

EPOCH_KEY = "chime:broker-epoch"


def queue_for(priority: str) -> str:
    return f"runs.{priority}"


def by_priority(rows) -> dict[str, list[str]]:
    """(run id, priority) pairs as run ids (strings, for the message) per priority tier."""
    grouped: dict[str, list[str]] = defaultdict(list)
    for run_id, priority in rows:
        grouped[priority].append(str(run_id))
    return grouped


def publish_runs(run_ids: list[str], *, priority: str) -> None:
    from apps.metrics.registry import PUBLISH_ERRORS

    from .tasks import deliver_runs_task

    chunk = settings.CHIME_ENQUEUE_CHUNK
    for start in range(0, len(run_ids), chunk):
        try:
            deliver_runs_task.apply_async(args=[run_ids[start : start + chunk]], queue=queue_for(priority))
        except Exception:
            PUBLISH_ERRORS.inc()  # the callers put the runs back or leave them to the sweeps
            raise


def broker_epoch() -> datetime | None:
    """When the broker's current contents began: the time its marker was set, setting it now if it
    is missing (an empty broker). None when the broker keeps no marker (embedded filesystem
    broker, which lives on disk) or cannot be reached (then nothing can be published anyway)."""
    if not settings.REDIS_URL:  # embedded mode: the filesystem broker lives on disk
        return None
    try:
        client = shared_client()
        client.set(EPOCH_KEY, repr(time.time()), nx=True)
        value = client.get(EPOCH_KEY)
    except Exception as exc:  # any redis error: the broker is away; publishing will tell
        logger.warning("broker unreachable while reading its epoch: %s", exc)
        return None
    if value is None:
        return None
    return datetime.fromtimestamp(float(value), tz=UTC)
