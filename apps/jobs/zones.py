"""IANA time zones and the local wall clock, for apps/jobs/schedules.py.

Pure Python (no Django). Which names a tenant may use (`load_zone`), whether this host has a tz
database at all, and how a naive local wall time maps to UTC: one instant, two (an overlap) or
none (a gap), found with zoneinfo alone so that no gap or overlap length is assumed
(docs/time-semantics.md). Kept apart from the cron schedules so each file holds one concept.
"""

from __future__ import annotations

import functools
import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

# Kinds of local wall time (see classify).
NORMAL, GAP, OVERLAP = 0, 1, 2

# IANA keys: letters, digits, '_', '+', '-' in '/'-separated segments ("Etc/GMT+5",
# "America/Port-au-Prince"). Rejects "", "../etc", "/etc/localtime", "Europe//Berlin", ...
_TZ_KEY_RE = re.compile(r"[A-Za-z][A-Za-z0-9_+\-]*(?:/[A-Za-z0-9_+\-]+)*")
# Files in the tz database directory that are not zone names a tenant should pick.
_NOT_ZONES = frozenset({"localtime", "posixrules", "Factory"})


@functools.lru_cache(maxsize=1)
def _available_zones() -> frozenset[str]:
    return frozenset(available_timezones())


@functools.lru_cache(maxsize=1024)
def load_zone(name: str) -> ZoneInfo | None:
    """The zone an IANA key names, or None: for a key a tenant may not use (a path, an alias file
    such as `localtime`), one this tz database does not list, or one it cannot load."""
    if len(name) > 64 or name in _NOT_ZONES or not _TZ_KEY_RE.fullmatch(name):
        return None
    zones = _available_zones()
    if zones and name not in zones:
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return None


def zone_database_available() -> bool:
    """Whether this process has a usable tz database at all. Without one (a slim image, a broken
    mount) every zone is "unknown": that is this host's problem, not the jobs' (the scheduler must
    not quarantine them for it). Not cached: asked only on the rare path."""
    try:
        ZoneInfo.no_cache("Europe/London")
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return False
    return True


def wall_of(utc_naive: datetime, tz: ZoneInfo) -> datetime:
    return utc_naive.replace(tzinfo=UTC).astimezone(tz).replace(tzinfo=None, fold=0)


def classify(wall: datetime, tz: ZoneInfo) -> tuple[int, datetime, datetime | None]:
    """Map a naive local wall time to naive-UTC instant(s).

    Returns (NORMAL, utc, None), (OVERLAP, earlier_utc, later_utc) or (GAP, lo, hi) where
    the zone's transition lies in (lo, hi]. Uses only zoneinfo, so gap/overlap lengths
    (30 minutes on Lord Howe, an hour elsewhere) are never assumed.
    """
    offset0 = wall.replace(tzinfo=tz).utcoffset()
    offset1 = wall.replace(tzinfo=tz, fold=1).utcoffset()
    utc0 = wall - offset0
    if offset0 == offset1:
        return NORMAL, utc0, None
    utc1 = wall - offset1
    exists0 = wall_of(utc0, tz) == wall
    exists1 = wall_of(utc1, tz) == wall
    first, second = (utc0, utc1) if utc0 <= utc1 else (utc1, utc0)
    if exists0 and exists1:
        return OVERLAP, first, second
    if exists0 or exists1:  # not produced by zoneinfo; treat the real one as normal
        return NORMAL, (utc0 if exists0 else utc1), None
    return GAP, first, second


def transition_in(lo: datetime, hi: datetime, tz: ZoneInfo) -> datetime:
    """First naive-UTC instant (whole seconds) in (lo, hi] whose UTC offset differs from lo's."""
    before = lo.replace(tzinfo=UTC).astimezone(tz).utcoffset()
    low, high = 0, int((hi - lo).total_seconds())
    while high - low > 1:
        middle = (low + high) // 2
        probe = lo + timedelta(seconds=middle)
        if probe.replace(tzinfo=UTC).astimezone(tz).utcoffset() == before:
            low = middle
        else:
            high = middle
    return lo + timedelta(seconds=high)
