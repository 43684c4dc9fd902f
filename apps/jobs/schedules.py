"""Cron schedules evaluated on a job's local wall clock, with explicit DST rules.

Pure Python (no Django). The rules are specified in docs/time-semantics.md; in short:

* the expression (parsed by apps/jobs/cron.py) is matched on the *naive* local wall clock;
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
import functools
import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

from .cron import FIELD_NAMES, CronFields, CronSyntaxError, parse_fields
from .zones import GAP, NORMAL, OVERLAP, classify, load_zone, transition_in, zone_database_available

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

GAP_CHOICES = ("shift", "skip")
OVERLAP_CHOICES = ("first", "both")


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


def parse_timezone(name: str) -> ZoneInfo:
    """The ZoneInfo for an IANA name, or ScheduleError("timezone", ...)."""
    zone = load_zone(name) if isinstance(name, str) else None
    if zone is None:
        shown = name if isinstance(name, str) else repr(name)
        if len(shown) > 64:
            shown = shown[:61] + "..."
        raise ScheduleError("timezone", f"Unknown time zone '{shown}'. Use an IANA name such as Europe/Berlin.")
    return zone


# --------------------------------------------------------------------------- expressions

_MONTH_LONG = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip
_MAX_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
#: The Gregorian calendar repeats (weekdays included) every 400 years: a day pattern that does not
#: occur within 400 years of any start never occurs.
_CALENDAR_CYCLE_DAYS = 146097

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


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _never_fires_reason(fields: CronFields) -> str | None:
    """A readable reason for day-of-month/month combinations that cannot occur ('0 0 30 2 *')."""
    if not fields.plain_days or not fields.days:
        return None
    months = sorted(fields.months)
    if any(day <= _MAX_DAYS[month - 1] for day in fields.days for month in months):
        return None
    day_text = " or ".join(_ordinal(d) for d in sorted(fields.days))
    if len(months) == 1:
        return f"This expression never fires: {_MONTH_LONG[months[0] - 1]} has no {day_text}."
    names = ", ".join(_MONTH_LONG[m - 1] for m in months)
    return f"This expression never fires: none of {names} has a {day_text}."


@dataclass(frozen=True)
class _Compiled:
    expression: str  # normalized, what we store and show
    is_fixed_time: bool
    fields: CronFields


def _fail(message: str):
    raise ScheduleError("expression", message)


def _seconds_hint(raw_fields: list[str]) -> str:
    """For a 6-field expression whose first field is seconds, the 5-field equivalent if any."""
    seconds, rest = raw_fields[0], raw_fields[1:]
    if seconds in ("0", "00"):
        return f" Without the seconds field, this is '{' '.join(rest)}'."
    return " Chime fires at most once a minute."


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
            _fail(
                f"The cron expression has 6 fields, but seconds are not supported. Use 5 fields: {_FIVE_FIELDS}."
                + _seconds_hint(raw_fields)
            )
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
        normalized = " ".join(fields)

    try:
        parsed = parse_fields(fields, shown=fields if text.startswith("@") else raw_fields)
    except CronSyntaxError as exc:
        _fail(str(exc))
    reason = _never_fires_reason(parsed)
    if reason:
        _fail(reason)
    if parsed.first_day(date(2000, 1, 1), limit_days=_CALENDAR_CYCLE_DAYS) is None:
        _fail("This expression never matches a real date.")
    is_fixed_time = "*" not in fields[0] and "*" not in fields[1]
    return _Compiled(normalized, is_fixed_time, parsed)


def validate_expression(expression: str) -> str:
    """The normalized expression, or ScheduleError("expression", ...)."""
    if not isinstance(expression, str):
        raise ScheduleError("expression", "The cron expression must be a string.")
    return _compile(expression).expression


# --------------------------------------------------------------------------- schedules


def _require_aware(value: datetime, field: str) -> datetime:
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
        raise ScheduleError(field, f"{field} must be a timezone-aware datetime.")
    return value.astimezone(UTC)


class CronSchedule:
    """A validated cron expression in an IANA zone with a DST policy. Immutable, hashable."""

    __slots__ = ("_fields", "_hash", "_key", "dst_policy", "expression", "is_fixed_time", "timezone")

    def __init__(self, expression: str, timezone: str | ZoneInfo, dst_policy: DstPolicy | dict | None = None):
        compiled = _compile_checked(expression)
        zone = timezone if isinstance(timezone, ZoneInfo) else parse_timezone(timezone)
        policy = dst_policy if isinstance(dst_policy, DstPolicy) else DstPolicy.from_dict(dst_policy)
        self.expression: str = compiled.expression
        self.timezone: ZoneInfo = zone
        self.dst_policy: DstPolicy = policy
        self.is_fixed_time: bool = compiled.is_fixed_time
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

    def __reduce__(self):  # pickle by definition, not by the parsed field sets
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

        Scans day by day with the parsed value sets (a day costs ~1µs), skipping whole months
        the expression excludes; a day that does not match costs one set lookup, so even a rare
        pattern ('0 0 29 2 *', 'MON#5' in February) is a few hundred checks per fire time.
        """
        fields = self._fields
        minutes, hours = fields.minutes, fields.hours
        first = start_wall.replace(second=0, microsecond=0, fold=0) + _MINUTE
        day, hour, minute = first.date(), first.hour, first.minute
        while True:
            found = fields.first_day(day, limit_days=_CALENDAR_CYCLE_DAYS)
            if found is None:
                return
            if found != day:
                day, hour, minute = found, 0, 0
            for h in hours[bisect.bisect_left(hours, hour) :]:
                start = bisect.bisect_left(minutes, minute) if h == hour else 0
                for m in minutes[start:]:
                    yield datetime(day.year, day.month, day.day, h, m)
            if day == date.max:
                return
            day += _DAY
            hour = minute = 0

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
            kind, first, second = classify(wall, tz)

            if kind == NORMAL:
                if first > last:
                    last = first
                    yield FireTime(first.replace(tzinfo=UTC), wall.replace(tzinfo=tz), None)
                continue

            if kind == GAP:
                if not shift_gaps:
                    continue  # real time skipped it (frequent) or policy says skip
                instant = transition_in(first, second, tz)
                flag = "gap"
                # Other gap wall times and a real wall time at the gap's end all land on
                # the same instant: emit it once, unflagged if the job really names it.
                while True:
                    following = next_wall()
                    if following is None:
                        break
                    f_kind, f_first, f_second = classify(following, tz)
                    if f_kind == GAP and transition_in(f_first, f_second, tz) == instant:
                        continue
                    if f_kind == NORMAL and f_first == instant:
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
                f_kind, f_first, f_second = classify(following, tz)
                if f_kind == OVERLAP and f_first < group[0][2]:
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
