"""Live-update events: tell dashboards that runs changed.

Call `runs_changed` after the change is committed (or `runs_changed_on_commit` inside a
transaction). It is best effort: a lost event only delays a dashboard until its next refresh, it
never loses a run.

Transport: a plain Redis PUBLISH to one channel per tenant ("chime:runs:<tenant id>"), which the
dashboard's WebSocket consumer subscribes to (apps/dashboard/consumers.py). Not the Channels
layer: `async_to_sync(channel_layer.group_send)` from a Celery worker can hit "Event loop is
closed" (django/channels_redis#332), while a synchronous redis-py client works the same in the
scheduler, a forked Celery child, a web request or a management command. The client is created
lazily per process (and again after a fork), with short timeouts, so a slow or absent Redis costs
a writer at most a second and never raises; after a failure the process leaves Redis alone for
DOWN_SECONDS, so an outage does not cost every request its own timeout.

Events carry only run ids and statuses; the consumer re-reads the rows from the database within
the subscriber's tenant, so an event can never show another tenant's data. Without REDIS_URL
(embedded mode) this is a no-op and the dashboard polls instead (docs/dashboard.md).
"""

import json
import logging
import os
import queue
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from contextlib import contextmanager

from django.conf import settings
from django.db import transaction

from apps.core.ids import id_text

logger = logging.getLogger(__name__)

CHANNEL_PREFIX = "chime:runs:"
MAX_RUNS_PER_MESSAGE = 500
TIMEOUT_SECONDS = 1.0
# After a call to Redis fails, this process leaves Redis alone this long (`redis_unavailable`):
# during an outage each request would otherwise wait its own timeout (and the client's retries),
# ~1 s per publish and per rate-limit check.
DOWN_SECONDS = 5.0
_down_until = 0.0
# The publisher thread publishes at most once per this long: what the recorder's steps hand it
# meanwhile goes out as one pipeline, a tenant's runs in one message and a run claimed and then
# recorded named once. The first change after a quiet spell goes out at once.
COALESCE_SECONDS = 0.25

_client = None
_client_pid = None
_client_lock = threading.Lock()


def channel_for(tenant_id) -> str:
    return f"{CHANNEL_PREFIX}{tenant_id}"


_compact = json.JSONEncoder(separators=(",", ":")).encode  # one encoder, not one per message


def encode(runs: list[tuple[str, str | None]]) -> str:
    return _compact({"runs": [[run_id, status] for run_id, status in runs]})


def decode(data: bytes | str) -> list[tuple[str, str | None]]:
    """(run id, status or None) pairs of one message; malformed input gives nothing."""
    try:
        runs = json.loads(data)["runs"]
        return [(str(run[0]), run[1] if len(run) > 1 else None) for run in runs]
    except (ValueError, KeyError, TypeError, IndexError):
        return []


def _redis():
    """One client per process. After a fork (Celery prefork) the parent's sockets are not reused."""
    global _client, _client_pid
    with _client_lock:
        if _client is None or _client_pid != os.getpid():
            import redis

            _client = redis.Redis.from_url(
                settings.REDIS_URL,
                socket_timeout=TIMEOUT_SECONDS,
                socket_connect_timeout=TIMEOUT_SECONDS,
                health_check_interval=30,
            )
            _client_pid = os.getpid()
        return _client


def redis_unavailable() -> bool:
    """True for DOWN_SECONDS after `note_redis_failure`: skip Redis (best-effort calls) or use a
    local fallback (rate limits) instead of waiting for a timeout on every call."""
    return time.monotonic() < _down_until


def note_redis_failure() -> None:
    global _down_until
    _down_until = time.monotonic() + DOWN_SECONDS


def shared_client():
    """This process's Redis client on REDIS_URL, for other short calls to the same server (the
    broker's epoch marker, apps/delivery/enqueue.py): one client per process, fork-safe."""
    return _redis()


_batch = threading.local()


@contextmanager
def batched(*, background: bool = False):
    """Inside the block, this thread's `runs_changed` calls (and the `runs_changed_on_commit` ones
    whose transaction commits in it) are collected and published once at its end: one pipeline,
    one message per tenant, a run changed twice (claimed, then recorded) named once. The delivery
    window's recorder wraps each step in it: at a spike each step published twice (the outcomes
    recorded, then the runs claimed into the freed slots), a message per tenant each time, ~66 µs
    per run at ~30 runs per step (bench/delivery_stages.py --hosts 1, issue #12). Nested blocks
    publish with the outermost.

    `background`: hand the changes to this process's publisher thread instead of waiting for
    Redis's replies here. The recorder records, frees slots and claims in one thread, one step
    after another; py-spy had ~10 % of its time at a spike waiting for the pipeline's replies."""
    if getattr(_batch, "changes", None) is not None:
        yield
        return
    _batch.changes = []
    try:
        yield
    finally:
        changes, _batch.changes = _batch.changes, None
        if changes and background:
            _publisher().put(changes)
        elif changes:
            _publish(changes)


class _Publisher:
    """One thread per process publishing what `batched(background=True)` hands it, in order, at
    most once per COALESCE_SECONDS; what piled up meanwhile goes out together (merged per tenant
    again). At a spike the recorder steps ~50 times a second per process, each step's runs spread
    over many tenants: published per step, a message went out for nearly every run twice (claimed,
    then succeeded ms later), ~5 % of a worker process's CPU (py-spy --gil, issue #12). A dashboard
    a quarter of a second later is still live. A daemon thread: events still queued when the process
    exits are lost, as any event may be (best effort)."""

    def __init__(self):
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._run, name="chime-events", daemon=True).start()

    def put(self, changes: list) -> None:
        self.queue.put(changes)

    def _run(self) -> None:
        last = float("-inf")
        while True:
            changes = self.queue.get()
            if (wait := last + COALESCE_SECONDS - time.monotonic()) > 0:
                time.sleep(wait)
            while True:
                try:
                    changes.extend(self.queue.get_nowait())
                except queue.Empty:
                    break
            try:
                _publish(changes)
            except Exception:  # a malformed change: the thread must live on, or its queue only grows
                logger.exception("could not publish %d run events", len(changes))
            last = time.monotonic()


_publisher_instance: _Publisher | None = None
_publisher_pid: int | None = None


def _publisher() -> _Publisher:
    """This process's publisher (a new one after a fork: the parent's thread does not exist here)."""
    global _publisher_instance, _publisher_pid
    with _client_lock:
        if _publisher_instance is None or _publisher_pid != os.getpid():
            _publisher_instance, _publisher_pid = _Publisher(), os.getpid()
        return _publisher_instance


def runs_changed(changes: Iterable[tuple]) -> None:
    """`changes`: (tenant_id, run_id) pairs, or (tenant_id, run_id, status), whose run was created or
    changed status. Published per tenant, in messages of at most MAX_RUNS_PER_MESSAGE runs."""
    if not settings.REDIS_URL:
        return
    pending = getattr(_batch, "changes", None)
    if pending is not None:
        pending.extend(changes)
        return
    _publish(changes)


def _publish(changes: Iterable[tuple]) -> None:
    by_tenant: dict[str, dict[str, str | None]] = defaultdict(dict)
    for change in changes:
        runs = by_tenant[id_text(change[0])]
        run_id = id_text(change[1])
        # A status, where a change names one, is kept over a later change that names none.
        runs[run_id] = change[2] if len(change) > 2 and change[2] is not None else runs.get(run_id)
    if not by_tenant or redis_unavailable():
        return
    try:
        pipe = _redis().pipeline(transaction=False)
        for tenant_id, runs in by_tenant.items():
            items = list(runs.items())
            for start in range(0, len(items), MAX_RUNS_PER_MESSAGE):
                pipe.publish(channel_for(tenant_id), encode(items[start : start + MAX_RUNS_PER_MESSAGE]))
        pipe.execute()
    except Exception:  # best effort by contract: a dashboard event must never break a write path
        note_redis_failure()
        logger.warning("could not publish run events for %d tenants", len(by_tenant), exc_info=True)


def runs_changed_on_commit(changes: Iterable[tuple]) -> None:
    """`runs_changed` once the current transaction commits (at once outside a transaction)."""
    changes = list(changes)
    if changes:
        transaction.on_commit(lambda: runs_changed(changes))
