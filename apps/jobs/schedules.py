"""Cron schedules evaluated on a job's local wall clock, with explicit DST rules.

Pure Python (no Django). The rules are specified in docs/time-semantics.md; in short:

* croniter walks the *naive* local wall clock (so its own DST handling is never used);
* every wall time is then mapped to UTC with zoneinfo:

  - normal wall time          -> the one instant it names;
  - wall time in a gap        -> frequent job: not fired; fixed-time job: ``DstPolicy.gap``
                                 ("shift": fire at the first instant after the gap, "skip");
  - wall time in an overlap   -> frequent job: both instants; fixed-time job:
                                 ``DstPolicy.overlap`` ("first": earlier instant, "both").

A job is *fixed-time* when neither its minute nor its hour field contains ``*``.

This module is on the scheduler's hot path: parsed schedules and ``next_after`` results are
cached (``functools.lru_cache``), and iteration never re-parses the expression.
"""

from __future__ import annotations

import bisect
import copy
import functools
import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import MAXYEAR, UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from croniter import CroniterBadDateError, CroniterError, croniter

__all__ = [
    "MAX_PREVIEW_COUNT",
    "CronSchedule",
    "DstPolicy",
    "FireTime",
    "ScheduleError",
    "parse_timezone",
    "validate_expression",
    "zone_database_available",
]

MAX_PREVIEW_COUNT = 1000
MAX_EXPRESSION_LENGTH = 200
NEXT_AFTER_CACHE_SIZE = 65536

_MINUTE = timedelta(minutes=1)
_DAY = timedelta(days=1)
_FAST_PATH_IDLE_DAYS = 800

GAP_CHOICES = ("shift", "skip")
OVERLAP_CHOICES = ("first", "both")

# Kinds of local wall time (see _classify).
_NORMAL, _GAP, _OVERLAP = 0, 1, 2


class ScheduleError(ValueError):
    """An invalid schedule input. ``field`` names the offending input, ``message`` is for humans."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"ScheduleError(field={self.field!r}, message={self.message!r})"

    def __reduce__(self):  # picklable despite the two-argument constructor
        return (type(self), (self.field, self.message))


# --------------------------------------------------------------------------- DST policy


@dataclass(frozen=True)
class DstPolicy:
    """What a fixed-time job does when its wall time is skipped (gap) or repeated (overlap)."""

    gap: str = "shift"  # "shift" | "skip"
    overlap: str = "first"  # "first" | "both"

    def __post_init__(self):
        if self.gap not in GAP_CHOICES:
            raise ScheduleError("dst_policy.gap", f"dst_policy.gap must be 'shift' or 'skip', not {self.gap!r}.")
        if self.overlap not in OVERLAP_CHOICES:
            raise ScheduleError(
                "dst_policy.overlap",
                f"dst_policy.overlap must be 'first' or 'both', not {self.overlap!r}.",
            )

    @classmethod
    def from_dict(cls, d: dict | None) -> DstPolicy:
        """Build from stored/API JSON. ``None`` or ``{}`` gives the default policy."""
        if d is None:
            return _DEFAULT_POLICY
        if not isinstance(d, dict):
            raise ScheduleError("dst_policy", "dst_policy must be an object with optional keys 'gap' and 'overlap'.")
        unknown = sorted(str(key) for key in d if key not in ("gap", "overlap"))
        if unknown:
            raise ScheduleError(
                "dst_policy",
                f"Unknown dst_policy key(s): {', '.join(unknown)}. Allowed: gap, overlap.",
            )
        return cls(gap=d.get("gap", "shift"), overlap=d.get("overlap", "first"))

    def to_dict(self) -> dict:
        return {"gap": self.gap, "overlap": self.overlap}


_DEFAULT_POLICY = DstPolicy()


@dataclass(frozen=True, slots=True)
class FireTime:
    """One occurrence. ``dst`` is None, "gap" (shifted out of a nonexistent wall time) or "overlap"."""

    utc: datetime
    local: datetime
    dst: str | None = None


# --------------------------------------------------------------------------- time zones

# IANA keys: letters, digits, '_', '+', '-' in '/'-separated segments ("Etc/GMT+5",
# "America/Port-au-Prince"). Rejects "", "../etc", "/etc/localtime", "Europe//Berlin", ...
_TZ_KEY_RE = re.compile(r"[A-Za-z][A-Za-z0-9_+\-]*(?:/[A-Za-z0-9_+\-]+)*")
# Files in the tz database directory that are not zone names a tenant should pick.
_NOT_ZONES = frozenset({"localtime", "posixrules", "Factory"})


@functools.lru_cache(maxsize=1)
def _available_zones() -> frozenset[str]:
    return frozenset(available_timezones())


@functools.lru_cache(maxsize=1024)
def _load_zone(name: str) -> ZoneInfo | None:
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


def parse_timezone(name: str) -> ZoneInfo:
    """The ZoneInfo for an IANA name, or ScheduleError("timezone", ...)."""
    zone = _load_zone(name) if isinstance(name, str) else None
    if zone is None:
        shown = name if isinstance(name, str) else repr(name)
        if len(shown) > 64:
            shown = shown[:61] + "..."
        raise ScheduleError("timezone", f"Unknown time zone '{shown}'. Use an IANA name such as Europe/Berlin.")
    return zone


# --------------------------------------------------------------------------- expressions

FIELD_NAMES = ("minute", "hour", "day-of-month", "month", "day-of-week")
_FIELD_RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
_MONTH_NAMES = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DOW_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_MONTH_LONG = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip
_MAX_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)

ALIASES = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
_FIVE_FIELDS = "minute hour day-of-month month day-of-week"
_HASH_OR_RANDOM_RE = re.compile(r"(?:^|,)[HR](?:$|[(/,])")
_EQUAL_RANGE_RE = re.compile(r"([0-9A-Z]+)-([0-9A-Z]+)(/[0-9]+|#[0-9]+)?")


def _token_value(field_index: int, token: str) -> int | None:
    if token.isdigit():
        value = int(token)
    elif field_index == 3 and token in _MONTH_NAMES:
        value = _MONTH_NAMES.index(token) + 1
    elif field_index == 4 and token in _DOW_NAMES:
        value = _DOW_NAMES.index(token)
    else:
        return None
    if field_index == 4 and value == 7:
        value = 0
    return value


def _collapse_equal_ranges(field_index: int, field: str) -> str:
    """'2-2' -> '2', 'MON-MON/3' -> 'MON', 'MON-MON#2' -> 'MON#2'.

    croniter 7 expands an equal range to the *whole* field ('30 2-2 * * *' would fire every
    hour); classic cron means the single value. Rewriting keeps the stored, normalized
    expression meaning the same thing to croniter and to a human.
    """
    parts = field.split(",")
    for i, part in enumerate(parts):
        match = _EQUAL_RANGE_RE.fullmatch(part)
        if match:
            low = _token_value(field_index, match.group(1))
            if low is not None and low == _token_value(field_index, match.group(2)):
                suffix = match.group(3) or ""
                parts[i] = match.group(1) + (suffix if suffix.startswith("#") else "")
    return ",".join(parts)


def _field_problem(field_index: int, field: str) -> str:
    """A human explanation of why one field is invalid (used after croniter rejected it)."""
    name = FIELD_NAMES[field_index]
    low, high = _FIELD_RANGES[field_index]
    for part in field.split(","):
        for match in re.finditer(r"([-/#]?)([0-9]+)", part):
            separator, value = match.group(1), int(match.group(2))
            if separator == "/":
                if value == 0:
                    return f"Invalid {name} field '{field}': a step must be at least 1."
            elif separator == "#":
                if not 1 <= value <= 5:
                    return f"Invalid {name} field '{field}': '#{value}' must be between #1 and #5."
            elif not low <= value <= high:
                return f"Invalid {name} field '{field}': {value} is out of range ({low}-{high})."
    allowed = f"numbers {low}-{high}"
    if field_index == 3:
        allowed += " or JAN-DEC"
    elif field_index == 4:
        allowed += " or SUN-SAT"
    return f"Invalid {name} field '{field}'. Use {allowed}, '*', lists (1,2), ranges (1-5) and steps (*/15)."


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _never_fires_reason(it: croniter) -> str | None:
    """Detect day-of-month/month combinations that cannot occur ('0 0 30 2 *')."""
    days, months, weekdays = it.expanded[2], it.expanded[3], it.expanded[4]
    if weekdays != ["*"] or it.nth_weekday_of_month or it.nearest_weekday:
        return None  # a day-of-week side (OR semantics) or W/# can still match
    if days == ["*"] or not all(isinstance(d, int) for d in days):
        return None
    months = range(1, 13) if months == ["*"] else months
    if any(day <= _MAX_DAYS[month - 1] for day in days for month in months):
        return None
    day_text = " or ".join(_ordinal(d) for d in sorted(days))
    if len(months) == 1:
        return f"This expression never fires: {_MONTH_LONG[months[0] - 1]} has no {day_text}."
    names = ", ".join(_MONTH_LONG[m - 1] for m in sorted(months))
    return f"This expression never fires: none of {names} has a {day_text}."


@dataclass(frozen=True)
class _Compiled:
    expression: str  # normalized, what we store and show
    is_fixed_time: bool
    prototype: croniter  # never iterated itself; copied per iteration
    fields: _FieldSets | None  # croniter's expansion, when it is plain enough for the fast path


@dataclass(frozen=True)
class _FieldSets:
    """croniter's expansion of a plain expression (no L, W, #), for the same-day fast path.

    Only an accelerator: it reads the value sets croniter expanded and applies croniter's
    day rule (day-of-month OR day-of-week when both are restricted, else AND), and the tests
    check it yields exactly the wall times croniter yields.
    """

    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int] | None  # None: any
    months: frozenset[int] | None
    weekdays: frozenset[int] | None  # 0 = Sunday
    day_or: bool

    @classmethod
    def from_croniter(cls, it: croniter) -> _FieldSets | None:
        minutes, hours, days, months, weekdays = it.expanded
        if it.nth_weekday_of_month or it.nearest_weekday:
            return None
        if not all(isinstance(v, int) or v == "*" for field in it.expanded for v in field):
            return None  # 'l' (last day of month)

        def values(field, low, high):
            return tuple(range(low, high + 1)) if field == ["*"] else tuple(sorted(field))

        def day_set(field):
            return None if field == ["*"] else frozenset(field)

        return cls(
            minutes=values(minutes, 0, 59),
            hours=values(hours, 0, 23),
            days=day_set(days),
            months=day_set(months),
            weekdays=day_set(weekdays),
            day_or=days != ["*"] and weekdays != ["*"],
        )

    def day_matches(self, day: date) -> bool:
        if self.months is not None and day.month not in self.months:
            return False
        dom = self.days is None or day.day in self.days
        dow = self.weekdays is None or day.isoweekday() % 7 in self.weekdays
        return (dom or dow) if self.day_or else (dom and dow)


def _fail(message: str):
    raise ScheduleError("expression", message)


@functools.lru_cache(maxsize=4096)
def _compile(expression: str) -> _Compiled:
    text = expression.strip()
    if not text:
        _fail(
            "The cron expression is empty. Use 5 fields (minute hour day-of-month month "
            "day-of-week), e.g. '0 9 * * MON-FRI', or an alias such as @daily."
        )
    if len(text) > MAX_EXPRESSION_LENGTH:
        _fail(f"The cron expression is too long (at most {MAX_EXPRESSION_LENGTH} characters).")
    if not re.fullmatch(r"[\x21-\x7e]+(?:[ \t]+[\x21-\x7e]+)*", text):
        _fail("The cron expression contains characters that are not allowed.")

    if text.startswith("@"):
        alias = text.lower()
        if alias == "@reboot":
            _fail("@reboot is not supported: Chime schedules follow the clock, not server restarts.")
        if alias not in ALIASES:
            _fail(f"Unknown alias '{text}'. Supported aliases: {', '.join(ALIASES)}.")
        normalized, fields = alias, ALIASES[alias].split()
    else:
        raw_fields = text.split()
        fields = [field.upper() for field in raw_fields]
        if len(fields) == 6:
            _fail(f"The cron expression has 6 fields, but seconds are not supported. Use 5 fields: {_FIVE_FIELDS}.")
        if len(fields) == 7:
            _fail(
                "The cron expression has 7 fields, but seconds and years are not supported. "
                f"Use 5 fields: {_FIVE_FIELDS}."
            )
        if len(fields) != 5:
            _fail(
                f"A cron expression needs exactly 5 fields ({_FIVE_FIELDS}) or an alias "
                f"such as @daily; got {len(fields)}."
            )
        for i, field in enumerate(fields):
            if _HASH_OR_RANDOM_RE.search(field):
                _fail(
                    f"Invalid {FIELD_NAMES[i]} field '{raw_fields[i]}': H (hashed) and R (random) values "
                    "are not supported."
                )
        fields = [_collapse_equal_ranges(i, field) for i, field in enumerate(fields)]
        normalized = " ".join(fields)

    try:
        prototype = croniter(" ".join(fields), datetime(2000, 1, 1), ret_type=datetime)
    except (CroniterError, ValueError, TypeError, KeyError, IndexError):
        for i, field in enumerate(fields):
            probe = ["*"] * 5
            probe[i] = field
            try:
                croniter(" ".join(probe), datetime(2000, 1, 1))
            except (CroniterError, ValueError, TypeError, KeyError, IndexError):
                _fail(_field_problem(i, field if text.startswith("@") else raw_fields[i]))
        _fail(f"'{text}' is not a valid cron expression.")

    reason = _never_fires_reason(prototype)
    if reason:
        _fail(reason)
    try:  # backstop: anything else croniter cannot find within its 50-year search window
        copy.copy(prototype).get_next(datetime, start_time=datetime(2000, 1, 1))
    except (CroniterBadDateError, OverflowError, ValueError):
        _fail("This expression never matches a real date.")

    is_fixed_time = "*" not in fields[0] and "*" not in fields[1]
    return _Compiled(normalized, is_fixed_time, prototype, _FieldSets.from_croniter(prototype))


def validate_expression(expression: str) -> str:
    """The normalized expression, or ScheduleError("expression", ...)."""
    if not isinstance(expression, str):
        raise ScheduleError("expression", "The cron expression must be a string.")
    return _compile(expression).expression


# --------------------------------------------------------------------------- wall clock -> UTC


def _wall_of(utc_naive: datetime, tz: ZoneInfo) -> datetime:
    return utc_naive.replace(tzinfo=UTC).astimezone(tz).replace(tzinfo=None, fold=0)


def _classify(wall: datetime, tz: ZoneInfo) -> tuple[int, datetime, datetime | None]:
    """Map a naive local wall time to naive-UTC instant(s).

    Returns (_NORMAL, utc, None), (_OVERLAP, earlier_utc, later_utc) or (_GAP, lo, hi) where
    the zone's transition lies in (lo, hi]. Uses only zoneinfo, so gap/overlap lengths
    (30 minutes on Lord Howe, an hour elsewhere) are never assumed.
    """
    offset0 = wall.replace(tzinfo=tz).utcoffset()
    offset1 = wall.replace(tzinfo=tz, fold=1).utcoffset()
    utc0 = wall - offset0
    if offset0 == offset1:
        return _NORMAL, utc0, None
    utc1 = wall - offset1
    exists0 = _wall_of(utc0, tz) == wall
    exists1 = _wall_of(utc1, tz) == wall
    first, second = (utc0, utc1) if utc0 <= utc1 else (utc1, utc0)
    if exists0 and exists1:
        return _OVERLAP, first, second
    if exists0 or exists1:  # not produced by zoneinfo; treat the real one as normal
        return _NORMAL, (utc0 if exists0 else utc1), None
    return _GAP, first, second


def _transition_in(lo: datetime, hi: datetime, tz: ZoneInfo) -> datetime:
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


# --------------------------------------------------------------------------- schedules


def _require_aware(value: datetime, field: str) -> datetime:
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
        raise ScheduleError(field, f"{field} must be a timezone-aware datetime.")
    return value.astimezone(UTC)


class CronSchedule:
    """A validated cron expression in an IANA zone with a DST policy. Immutable, hashable."""

    __slots__ = ("_fields", "_hash", "_key", "_prototype", "dst_policy", "expression", "is_fixed_time", "timezone")

    def __init__(self, expression: str, timezone: str | ZoneInfo, dst_policy: DstPolicy | dict | None = None):
        compiled = _compile_checked(expression)
        zone = timezone if isinstance(timezone, ZoneInfo) else parse_timezone(timezone)
        policy = dst_policy if isinstance(dst_policy, DstPolicy) else DstPolicy.from_dict(dst_policy)
        self.expression: str = compiled.expression
        self.timezone: ZoneInfo = zone
        self.dst_policy: DstPolicy = policy
        self.is_fixed_time: bool = compiled.is_fixed_time
        self._prototype = compiled.prototype
        self._fields = compiled.fields
        self._key = (compiled.expression, zone.key, policy)
        self._hash = hash(self._key)

    @classmethod
    def parse(cls, expression: str, timezone: str, dst_policy: DstPolicy | None = None) -> CronSchedule:
        """Validate and return a (cached) schedule. Raises ScheduleError."""
        if not isinstance(expression, str):
            raise ScheduleError("expression", "The cron expression must be a string.")
        if isinstance(timezone, ZoneInfo) and timezone.key is not None:
            timezone = timezone.key
        if not isinstance(timezone, str):
            parse_timezone(timezone)  # raises with the standard message
        if dst_policy is None:
            dst_policy = _DEFAULT_POLICY
        elif not isinstance(dst_policy, DstPolicy):
            dst_policy = DstPolicy.from_dict(dst_policy)
        return _parse_cached(expression, timezone, dst_policy)

    def __eq__(self, other):
        return isinstance(other, CronSchedule) and self._key == other._key

    def __reduce__(self):  # pickle by definition, not by croniter internals
        return (CronSchedule, (self.expression, self.timezone, self.dst_policy))

    def __hash__(self):
        return self._hash

    def __repr__(self):
        return (
            f"CronSchedule({self.expression!r}, {self.timezone.key!r}, "
            f"DstPolicy(gap={self.dst_policy.gap!r}, overlap={self.dst_policy.overlap!r}))"
        )

    # -- public iteration API

    def iter_after(self, after: datetime) -> Iterator[FireTime]:
        """Fire times strictly after ``after``, ascending in UTC, without duplicates."""
        return self._iter(_require_aware(after, "start"))

    def next_after(self, after: datetime) -> datetime | None:
        """The first fire time (UTC) strictly after ``after``; None if it never fires again."""
        return _next_after_cached(self, _require_aware(after, "start"))

    def between(self, start: datetime, end: datetime, limit: int) -> list[FireTime]:
        """Fire times t with start < t <= end, at most ``limit`` of them."""
        start_utc = _require_aware(start, "start")
        end_utc = _require_aware(end, "end")
        if end_utc < start_utc:
            raise ScheduleError("start", "start must not be after end.")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ScheduleError("count", "limit must be a non-negative integer.")
        result: list[FireTime] = []
        if limit == 0:
            return result
        for fire in self._iter(start_utc):
            if fire.utc > end_utc:
                break
            result.append(fire)
            if len(result) >= limit:
                break
        return result

    def preview(self, start: datetime, count: int) -> list[FireTime]:
        """The next ``count`` fire times strictly after ``start``."""
        start_utc = _require_aware(start, "start")
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_PREVIEW_COUNT:
            raise ScheduleError("count", f"count must be an integer from 1 to {MAX_PREVIEW_COUNT}.")
        return list(itertools.islice(self._iter(start_utc), count))

    # -- implementation

    def _walls(self, start_wall: datetime) -> Iterator[datetime]:
        """Matching naive wall times strictly after ``start_wall``, ascending.

        Fast path for plain expressions: scan day by day with croniter's expanded value sets
        (a day costs ~1µs instead of ~40µs per croniter step); after a long run of
        non-matching days or months (e.g. '0 0 29 2 *') hand over to croniter itself.
        """
        fields = self._fields
        if fields is None:
            yield from self._croniter_walls(start_wall)
            return
        minutes, hours = fields.minutes, fields.hours
        first = start_wall.replace(second=0, microsecond=0, fold=0) + _MINUTE
        day, hour, minute = first.date(), first.hour, first.minute
        idle_days = 0
        while True:
            if fields.day_matches(day):
                idle_days = 0
                for h in hours[bisect.bisect_left(hours, hour) :]:
                    start = bisect.bisect_left(minutes, minute) if h == hour else 0
                    for m in minutes[start:]:
                        yield datetime(day.year, day.month, day.day, h, m)
                day += _DAY
            else:
                idle_days += 1
                if idle_days > _FAST_PATH_IDLE_DAYS:
                    yield from self._croniter_walls(datetime(day.year, day.month, day.day) - _MINUTE)
                    return
                if fields.months is not None and day.month not in fields.months:
                    if day.year == MAXYEAR and day.month == 12:
                        return
                    day = date(day.year + day.month // 12, day.month % 12 + 1, 1)  # next month
                else:
                    day += _DAY
            hour = minute = 0

    def _croniter_walls(self, start_wall: datetime) -> Iterator[datetime]:
        """Matching naive wall times strictly after ``start_wall``, ascending (croniter)."""
        it = copy.copy(self._prototype)  # croniter is stateful; the prototype is shared
        it.set_current(start_wall, force=True)
        get_next = it.get_next
        while True:
            try:
                yield get_next(datetime)
            except (CroniterBadDateError, OverflowError, ValueError):
                return

    def _iter(self, after: datetime) -> Iterator[FireTime]:
        try:
            yield from self._iter_unguarded(after)
        except OverflowError:  # the end of datetime's range: there is no "next" any more
            return

    def _iter_unguarded(self, after: datetime) -> Iterator[FireTime]:
        tz = self.timezone
        fixed = self.is_fixed_time
        shift_gaps = fixed and self.dst_policy.gap == "shift"
        both_folds = not fixed or self.dst_policy.overlap == "both"

        local = after.astimezone(tz)
        start_wall = local.replace(tzinfo=None, fold=0)
        if local.fold == 0:
            # Inside the first pass of an overlap the wall clock will come back: the
            # fold=1 instants of wall times up to an overlap-length earlier are still ahead.
            repeat = local.utcoffset() - local.replace(fold=1).utcoffset()
            if repeat > timedelta(0):
                start_wall -= repeat

        last = after.replace(tzinfo=None)  # naive UTC; everything emitted is > last
        walls = self._walls(start_wall)
        pushed: list[datetime] = []

        def next_wall() -> datetime | None:
            return pushed.pop() if pushed else next(walls, None)

        while True:
            wall = next_wall()
            if wall is None:
                return
            kind, first, second = _classify(wall, tz)

            if kind == _NORMAL:
                if first > last:
                    last = first
                    yield FireTime(first.replace(tzinfo=UTC), wall.replace(tzinfo=tz), None)
                continue

            if kind == _GAP:
                if not shift_gaps:
                    continue  # real time skipped it (frequent) or policy says skip
                instant = _transition_in(first, second, tz)
                flag = "gap"
                # Other gap wall times and a real wall time at the gap's end all land on
                # the same instant: emit it once, unflagged if the job really names it.
                while True:
                    following = next_wall()
                    if following is None:
                        break
                    f_kind, f_first, f_second = _classify(following, tz)
                    if f_kind == _GAP and _transition_in(f_first, f_second, tz) == instant:
                        continue
                    if f_kind == _NORMAL and f_first == instant:
                        flag = None
                        continue
                    pushed.append(following)
                    break
                if instant > last:
                    last = instant
                    aware = instant.replace(tzinfo=UTC)
                    yield FireTime(aware, aware.astimezone(tz), flag)
                continue

            # Overlap: collect every wall time of this overlap, then emit all first-pass
            # (fold=0) instants before all second-pass (fold=1) ones -- that is UTC order.
            group = [(wall, first, second)]
            while True:
                following = next_wall()
                if following is None:
                    break
                f_kind, f_first, f_second = _classify(following, tz)
                if f_kind == _OVERLAP and f_first < group[0][2]:
                    group.append((following, f_first, f_second))
                    continue
                pushed.append(following)
                break
            for g_wall, g_first, _ in group:
                if g_first > last:
                    last = g_first
                    yield FireTime(g_first.replace(tzinfo=UTC), g_wall.replace(tzinfo=tz), "overlap")
            if both_folds:
                for g_wall, _, g_second in group:
                    if g_second > last:
                        last = g_second
                        yield FireTime(g_second.replace(tzinfo=UTC), g_wall.replace(tzinfo=tz, fold=1), "overlap")


def _compile_checked(expression: str) -> _Compiled:
    if not isinstance(expression, str):
        raise ScheduleError("expression", "The cron expression must be a string.")
    return _compile(expression)


@functools.lru_cache(maxsize=4096)
def _parse_cached(expression: str, timezone: str, dst_policy: DstPolicy) -> CronSchedule:
    return CronSchedule(expression, timezone, dst_policy)


@functools.lru_cache(maxsize=NEXT_AFTER_CACHE_SIZE)
def _next_after_cached(schedule: CronSchedule, after_utc: datetime) -> datetime | None:
    # Keyed on (expression, timezone, policy) through CronSchedule.__hash__/__eq__, and `after`.
    for fire in schedule._iter(after_utc):
        return fire.utc
    return None
