"""Atomic counting of hits and held slots, shared by every process through Redis.

One primitive serves both rate limits and connection caps: a sorted set of members, each scored
with the moment it expires. `acquire` drops the expired members, then adds (or renews) the caller's
member if fewer than `limit` remain, all inside one Lua script, so concurrent callers across keys
and processes can never pass more than `limit` (DRF's SimpleRateThrottle reads the history, then
writes it back: concurrent requests all read the same history, and 1,713 passed a 1,200 limit).

- A rate limit ("300/min") is a sliding log: every hit is a new member that expires after the
  window, so at most `limit` hits pass in any window of that length, also across its edges (a
  fixed window lets twice the limit through around a boundary).
- A cap (live connections) is a member per holder, renewed while it is held and removed on
  release; a holder that crashed stops renewing, and its slot expires after `ttl`.

The clock is the Redis server's (`TIME`), so web processes with skewed clocks agree. Without
REDIS_URL (the embedded `./chime run`), the same logic runs in process memory behind a lock:
exact for the one web process that mode has.
"""

import logging
import math
import re
import threading
import time
import uuid
from dataclasses import dataclass

from django.conf import settings

from apps.core.events import note_redis_failure, redis_unavailable

logger = logging.getLogger(__name__)

UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
RATE_PATTERN = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*(s|sec|second|m|min|minute|h|hour|d|day)s?\s*$")


@dataclass(frozen=True)
class Rate:
    """`count` hits per `seconds`, written as "1200/min", "10/15min", "3/hour"."""

    count: int
    seconds: int

    @classmethod
    def parse(cls, text: str) -> "Rate":
        match = RATE_PATTERN.match(text or "")
        if match is None:
            raise ValueError(f"{text!r} is not a rate like '1200/min', '10/15min' or '3/hour'.")
        count, multiple, unit = int(match[1]), int(match[2] or 1), match[3][0]
        if multiple < 1:
            raise ValueError(f"{text!r}: the period must be at least 1.")
        return cls(count=count, seconds=multiple * UNIT_SECONDS[unit])

    def __str__(self) -> str:
        for unit, name in ((86400, "day"), (3600, "hour"), (60, "min")):
            if self.seconds % unit == 0:
                multiple = self.seconds // unit
                return f"{self.count}/{multiple if multiple > 1 else ''}{name}"
        return f"{self.count}/{self.seconds}s"


@dataclass(frozen=True)
class Decision:
    allowed: bool
    retry_after_seconds: int = 0  # when refused: until the oldest slot frees (at least 1)


ACQUIRE_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
local cost = tonumber(ARGV[4] or '1')
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZSCORE', KEYS[1], ARGV[1]) or redis.call('ZCARD', KEYS[1]) + cost <= tonumber(ARGV[3]) then
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
  for i = 2, cost do
    redis.call('ZADD', KEYS[1], now + ttl, ARGV[1] .. ':' .. i)
  end
  redis.call('PEXPIRE', KEYS[1], ttl)
  return {1, 0}
end
-- Refused: wait until enough slots have expired for this cost (for one slot, the oldest).
local need = redis.call('ZCARD', KEYS[1]) + cost - tonumber(ARGV[3])
local first = redis.call('ZRANGE', KEYS[1], need - 1, need - 1, 'WITHSCORES')
return {0, tonumber(first[2]) - now}
"""

_script = None
_script_client = None
_local_lock = threading.Lock()
_local: dict[str, dict[str, float]] = {}


def _redis_script():
    global _script, _script_client
    from apps.core.events import shared_client

    client = shared_client()
    if _script is None or _script_client is not client:
        _script, _script_client = client.register_script(ACQUIRE_LUA), client
    return _script


def _key(name: str) -> str:
    return f"chime:limit:{name}"


def acquire(name: str, *, limit: int, ttl_seconds: float, member: str | None = None, cost: int = 1) -> Decision:
    """Take (or renew) one of `limit` slots of `name` for `ttl_seconds`. Without `member`, a new
    one-off member: a hit of a rate limit. `cost`: take that many slots at once, all or none (a
    batch request that weighs as several; new members only)."""
    member = member or uuid.uuid4().hex
    ttl_ms = max(int(ttl_seconds * 1000), 1)
    if limit <= 0 or cost > limit:
        return Decision(False, max(math.ceil(ttl_seconds), 1))
    if settings.REDIS_URL and not redis_unavailable():
        try:
            allowed, wait_ms = _redis_script()(keys=[_key(name)], args=[member, ttl_ms, limit, cost])
        except Exception:
            # Redis is away: this process counts on its own for a while (the limit then holds per
            # process instead of across them) rather than refusing every request or enforcing
            # nothing (docs/api.md#limits-and-quotas). Logged, so the outage is seen.
            note_redis_failure()
            logger.warning("rate limit %s counted in this process: Redis unavailable", name.split(":")[0], exc_info=1)
        else:
            return Decision(bool(allowed), 0 if allowed else max(math.ceil(int(wait_ms) / 1000), 1))
    return _acquire_local(_key(name), member, limit, ttl_ms / 1000, cost)


def release(name: str, member: str) -> None:
    """Give a held slot back (a closed connection); expiry is the fallback when this never runs."""
    if settings.REDIS_URL and not redis_unavailable():
        try:
            from apps.core.events import shared_client

            shared_client().zrem(_key(name), member)
        except Exception:
            note_redis_failure()
            logger.warning("could not release a slot of %s; it expires on its own", name, exc_info=True)
    with _local_lock:
        _local.get(_key(name), {}).pop(member, None)


def _acquire_local(key: str, member: str, limit: int, ttl: float, cost: int = 1) -> Decision:
    now = time.monotonic()
    with _local_lock:
        if len(_local) > 10_000:  # many accounts and addresses: forget the keys with nothing held
            for stale in [k for k, slots in _local.items() if all(e <= now for e in slots.values())]:
                del _local[stale]
        slots = _local.setdefault(key, {})
        for held, expires in list(slots.items()):
            if expires <= now:
                del slots[held]
        if member in slots or len(slots) + cost <= limit:
            slots[member] = now + ttl
            for extra in range(2, cost + 1):
                slots[f"{member}:{extra}"] = now + ttl
            return Decision(True)
        need = len(slots) + cost - limit  # expiries to wait for (for one slot: the oldest)
        return Decision(False, max(math.ceil(sorted(slots.values())[need - 1] - now), 1))


def reset_local() -> None:
    """Forget the in-memory counts (tests of the embedded mode)."""
    with _local_lock:
        _local.clear()
