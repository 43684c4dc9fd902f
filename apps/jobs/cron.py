"""Cron expressions: the five fields parsed into value sets, and the day rule. Pure Python.

The grammar is Debian/Vixie cron's, read the way the reference implementations read it (cronsim,
healthchecks' cron library, is the oracle of tests/jobs/test_cron_reference.py), plus the common
extensions: `?`, `L`, `LW`, `15W`, `5L`/`L5` (last Friday), `MON#2`, names, and wrap-around ranges
(`FRI-MON`, `22-2`). Chime's deliberate differences are listed in docs/time-semantics.md; the
one that matters is the day rule: a day field is *restricted* when it does not match every day
(`*/2` is restricted, `*,5` and `0-7` are not), not when it "does not start with `*`".

Why not croniter (Chime used it until issue #11): croniter 7 raises on a list containing `*`
(`*,5`), reads day-of-week `0-7` as Sunday, widens an equal range to the whole field (`2-2`),
accepts a zero step inside a range, and applies AND instead of the documented OR rule to `#`
with a restricted day of month. Each of those needed a rewrite around it; parsing the fields
here is shorter than the workarounds and makes the value sets the single source of truth for
matching, iteration (apps/jobs/schedules.py) and validation messages.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import date, timedelta

__all__ = ["FIELD_NAMES", "CronFields", "CronSyntaxError", "parse_fields"]

FIELD_NAMES = ("minute", "hour", "day-of-month", "month", "day-of-week")
_RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
_MONTH_NAMES = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DOW_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_DOM, _MONTH, _DOW = 2, 3, 4
_ALL_DAYS = frozenset(range(1, 32))
_ALL_WEEKDAYS = frozenset(range(7))
_VALUE = r"[0-9]+|[A-Z]{3}"
_ITEM_RE = re.compile(rf"(?P<start>\*|\?|{_VALUE})(?:-(?P<end>{_VALUE}))?(?:/(?P<step>[0-9]+))?")
_NTH_RE = re.compile(rf"(?P<day>{_VALUE})#(?P<nth>[0-9]+)")
_LAST_DOW_RE = re.compile(rf"(?P<day>{_VALUE})L|L(?P<day2>{_VALUE})")
_NEAREST_RE = re.compile(r"(?P<day>[0-9]+)W")


class CronSyntaxError(ValueError):
    """One field is invalid; the message names the field and says what is allowed."""


@dataclass(frozen=True)
class CronFields:
    """What an expression matches. Weekdays are 0-6, Sunday 0 (a 7 is read as Sunday)."""

    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int]
    last_day: bool  # L
    last_weekday: bool  # LW: the last Monday-to-Friday of the month
    nearest_weekdays: frozenset[int]  # 15W: the Monday-to-Friday nearest the 15th, within the month
    months: frozenset[int]
    weekdays: frozenset[int]
    nth_weekdays: frozenset[tuple[int, int]]  # (weekday, n): MON#2 is (1, 2)
    last_weekdays: frozenset[int]  # 5L: the last Friday of the month
    dom_restricted: bool
    dow_restricted: bool

    def day_matches(self, day: date) -> bool:
        """Classic cron's day rule: when both day fields are restricted, either may match;
        otherwise the restricted one (if any) decides."""
        if day.month not in self.months:
            return False
        if self.dom_restricted and self.dow_restricted:
            return self._dom_matches(day) or self._dow_matches(day)
        if self.dom_restricted:
            return self._dom_matches(day)
        if self.dow_restricted:
            return self._dow_matches(day)
        return True

    def _dom_matches(self, day: date) -> bool:
        if day.day in self.days:
            return True
        if not (self.last_day or self.last_weekday or self.nearest_weekdays):
            return False
        length = calendar.monthrange(day.year, day.month)[1]
        if self.last_day and day.day == length:
            return True
        if self.last_weekday and day.day == _weekday_nearest(day.year, day.month, length, length):
            return True
        return any(day.day == _weekday_nearest(day.year, day.month, n, length) for n in self.nearest_weekdays)

    def _dow_matches(self, day: date) -> bool:
        weekday = day.isoweekday() % 7
        if weekday in self.weekdays:
            return True
        if (weekday, (day.day + 6) // 7) in self.nth_weekdays:
            return True
        if weekday in self.last_weekdays:
            return day.day + 7 > calendar.monthrange(day.year, day.month)[1]
        return False

    @property
    def plain_days(self) -> bool:
        """Only explicit days of month and months restrict the date (no L, W, # or weekdays)."""
        return not (self.last_day or self.last_weekday or self.nearest_weekdays or self.dow_restricted)

    def first_day(self, start: date, *, limit_days: int) -> date | None:
        """The first matching day on or after `start`, looking at most `limit_days` ahead."""
        day, end = start, start + timedelta(days=limit_days)
        while day <= end:
            if day.month not in self.months:
                if day.month == 12 and day.year == 9999:
                    return None
                day = date(day.year + day.month // 12, day.month % 12 + 1, 1)
                continue
            if self.day_matches(day):
                return day
            if day == date.max:
                return None
            day += timedelta(days=1)
        return None


def _weekday_nearest(year: int, month: int, target: int, length: int) -> int | None:
    """The Monday-to-Friday nearest day `target` of the month, never crossing into another month
    (Quartz's `W`); None when the month has no such day."""
    if target > length:
        return None
    weekday = date(year, month, target).weekday()  # Monday 0
    if weekday < 5:
        return target
    if weekday == 5:  # Saturday: Friday before, or Monday after when the 1st is a Saturday
        return target - 1 if target > 1 else target + 2
    return target + 1 if target < length else target - 2  # Sunday


def parse_fields(fields: list[str], shown: list[str] | None = None) -> CronFields:
    """Five upper-cased fields -> CronFields, or CronSyntaxError naming the field as `shown`
    (the fields as the user typed them; by default `fields`)."""
    shown = shown or fields
    sets = [_parse_field(index, field, shown[index]) for index, field in enumerate(fields)]
    minutes, hours, dom, months, dow = sets
    weekdays = frozenset(0 if v == 7 else v for v in dow.values)
    return CronFields(
        minutes=tuple(sorted(minutes.values)),
        hours=tuple(sorted(hours.values)),
        days=frozenset(dom.values),
        last_day=dom.last_day,
        last_weekday=dom.last_weekday,
        nearest_weekdays=frozenset(dom.nearest),
        months=frozenset(months.values),
        weekdays=weekdays,
        nth_weekdays=frozenset((0 if d == 7 else d, n) for d, n in dow.nth),
        last_weekdays=frozenset(0 if d == 7 else d for d in dow.last),
        dom_restricted=not (dom.values >= _ALL_DAYS),
        dow_restricted=not (weekdays >= _ALL_WEEKDAYS),
    )


@dataclass
class _Field:
    values: set[int]
    last_day: bool = False
    last_weekday: bool = False
    nearest: set[int] | None = None
    nth: set[tuple[int, int]] | None = None
    last: set[int] | None = None

    def __post_init__(self):
        self.nearest = self.nearest or set()
        self.nth = self.nth or set()
        self.last = self.last or set()


def _parse_field(index: int, field: str, shown: str) -> _Field:
    """`shown` is the field as typed, for messages; `field` is upper-cased."""
    result = _Field(values=set())
    if not field or field.startswith(",") or field.endswith(",") or ",," in field:
        raise _error(index, shown)
    for item in field.split(","):
        _parse_item(index, shown, item, result)
    return result


def _parse_item(index: int, field: str, item: str, result: _Field) -> None:
    """`field` (as typed) is only for messages."""
    name = FIELD_NAMES[index]
    if index == _DOM and item in ("L", "LW"):
        result.last_day |= item == "L"
        result.last_weekday |= item == "LW"
        return
    if index == _DOM and (match := _NEAREST_RE.fullmatch(item)):
        result.nearest.add(_value(index, field, match["day"]))
        return
    if index == _DOM and item.startswith("L-"):
        raise CronSyntaxError(
            f"Invalid {name} field '{field}': 'L-n' (n days before the last) is not supported. "
            "Use 'L' for the last day or list the days, e.g. '28-31'."
        )
    if index == _DOW and item == "L":
        raise CronSyntaxError(
            f"Invalid {name} field '{field}': a bare 'L' is ambiguous here. "
            "Write the weekday: '5L' is the last Friday of the month, 'SAT' every Saturday."
        )
    if index == _DOW and (match := _NTH_RE.fullmatch(item)):
        nth = int(match["nth"])
        if not 1 <= nth <= 5:
            raise CronSyntaxError(f"Invalid {name} field '{field}': '#{nth}' must be between #1 and #5.")
        result.nth.add((_value(index, field, match["day"]), nth))
        return
    if index == _DOW and (match := _LAST_DOW_RE.fullmatch(item)):
        result.last.add(_value(index, field, match["day"] or match["day2"]))
        return
    match = _ITEM_RE.fullmatch(item)
    if not match:
        raise _error(index, field)
    low, high = _RANGES[index]
    start, end, step = match["start"], match["end"], match["step"]
    if step is not None and int(step) == 0:
        raise CronSyntaxError(f"Invalid {name} field '{field}': a step must be at least 1.")
    if start in ("*", "?"):
        if start == "?" and index not in (_DOM, _DOW):
            raise _error(index, field)
        if end is not None:
            raise _error(index, field)
        sequence = list(range(low, 7 if index == _DOW else high + 1))
    else:
        first = _value(index, field, start)
        if end is not None:
            last = _value(index, field, end)
            if index == _DOW and last == 0 and first > 0:
                last = 7  # FRI-SUN: Sunday as the end of a week
            if first <= last:
                sequence = list(range(first, last + 1))
            else:  # wrap-around range: 22-2 is 22, 23, 0, 1, 2
                top = 6 if index == _DOW else high
                sequence = list(range(first, top + 1)) + list(range(low, last + 1))
        elif step is not None:
            sequence = list(range(first, high + 1))  # 5/15: from 5 to the end of the field
        else:
            sequence = [first]
    result.values.update(sequence[:: int(step)] if step is not None else sequence)


def _value(index: int, field: str, token: str) -> int:
    name = FIELD_NAMES[index]
    low, high = _RANGES[index]
    if token.isdigit():
        value = int(token)
        if not low <= value <= high:
            raise CronSyntaxError(f"Invalid {name} field '{field}': {value} is out of range ({low}-{high}).")
        return value
    if index == _MONTH and token in _MONTH_NAMES:
        return _MONTH_NAMES.index(token) + 1
    if index == _DOW and token in _DOW_NAMES:
        return _DOW_NAMES.index(token)
    raise _error(index, field)


def _error(index: int, field: str) -> CronSyntaxError:
    name = FIELD_NAMES[index]
    low, high = _RANGES[index]
    allowed = f"numbers {low}-{high}"
    if index == _MONTH:
        allowed += " or JAN-DEC"
    elif index == _DOW:
        allowed += " or SUN-SAT (0 and 7 are Sunday), 5L (last Friday), MON#2 (second Monday)"
    elif index == _DOM:
        allowed += ", L (last day), LW (last weekday), 15W (weekday nearest the 15th)"
    return CronSyntaxError(
        f"Invalid {name} field '{field}'. Use {allowed}, '*', lists (1,2), ranges (1-5) and steps (*/15)."
    )
