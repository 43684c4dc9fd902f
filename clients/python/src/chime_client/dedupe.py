"""Dedupe stores: remember which ``webhook-id`` values were handled.

A store answers :meth:`DedupeStore.claim` atomically with one of three states, so that two
deliveries of one run arriving together cannot both run the handler:

- ``CLAIMED``: this caller now holds the id (for ``lease_seconds``); run the handler, then call
  ``complete`` (success) or ``release`` (failure, so a retry can claim it again);
- ``DONE``: handled before; acknowledge without running the handler;
- ``BUSY``: another request holds it right now; ask the sender to come back later.

A claim that is never completed nor released (the process died) expires after its lease.
"""

from __future__ import annotations

import threading
import time
from typing import Literal, Protocol, runtime_checkable

__all__ = ["BUSY", "CLAIMED", "DONE", "ClaimState", "DedupeStore", "MemoryStore", "RedisStore"]

ClaimState = Literal["claimed", "done", "busy"]
CLAIMED: ClaimState = "claimed"
DONE: ClaimState = "done"
BUSY: ClaimState = "busy"


@runtime_checkable
class DedupeStore(Protocol):
    def claim(self, webhook_id: str, lease_seconds: float) -> ClaimState: ...

    def complete(self, webhook_id: str, keep_seconds: float) -> None: ...

    def release(self, webhook_id: str) -> None: ...


class MemoryStore:
    """One process's memory: for tests, a single-process receiver, ``chimectl listen``."""

    def __init__(self, clock=time.monotonic):
        self._entries: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()
        self._clock = clock

    def claim(self, webhook_id: str, lease_seconds: float) -> ClaimState:
        now = self._clock()
        with self._lock:
            entry = self._entries.get(webhook_id)
            if entry and entry[1] > now:
                return DONE if entry[0] == DONE else BUSY
            self._entries[webhook_id] = ("processing", now + lease_seconds)
            return CLAIMED

    def complete(self, webhook_id: str, keep_seconds: float) -> None:
        with self._lock:
            self._entries[webhook_id] = (DONE, self._clock() + keep_seconds)

    def release(self, webhook_id: str) -> None:
        with self._lock:
            entry = self._entries.get(webhook_id)
            if entry and entry[0] != DONE:
                del self._entries[webhook_id]


# KEYS[1]: the id's key. Deletes it only while it is a claim (not once it is done).
_RELEASE = "if redis.call('GET', KEYS[1]) == 'processing' then return redis.call('DEL', KEYS[1]) end return 0"


class RedisStore:
    """Redis (``redis-py`` client): shared by every process of the receiver; ``SET NX PX`` claims."""

    def __init__(self, client, *, prefix: str = "chime:webhook:"):
        self.client = client
        self.prefix = prefix

    def _key(self, webhook_id: str) -> str:
        return self.prefix + webhook_id

    def claim(self, webhook_id: str, lease_seconds: float) -> ClaimState:
        key = self._key(webhook_id)
        if self.client.set(key, "processing", nx=True, px=max(1, int(lease_seconds * 1000))):
            return CLAIMED
        value = self.client.get(key)
        if value is None:  # expired between the two calls: try once more
            return CLAIMED if self.client.set(key, "processing", nx=True, px=int(lease_seconds * 1000)) else BUSY
        return DONE if value in (b"done", "done") else BUSY

    def complete(self, webhook_id: str, keep_seconds: float) -> None:
        self.client.set(self._key(webhook_id), "done", px=max(1, int(keep_seconds * 1000)))

    def release(self, webhook_id: str) -> None:
        self.client.eval(_RELEASE, 1, self._key(webhook_id))
