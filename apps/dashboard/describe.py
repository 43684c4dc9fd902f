"""Schedules in words: "at 02:00 every day, Europe/Berlin".

Covers the common shapes (every N minutes, hourly, daily at fixed times, weekdays, days of the
month); anything else is shown as the expression itself, which is always correct.
"""

import re
from datetime import UTC

from apps.jobs.models import JobDefinition, ScheduleType
from apps.jobs.schedules import ALIASES

from .zones import zone_or_none

DAY_NAMES = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
DOW_TOKENS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
MONTH_NAMES = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip
MONTH_TOKENS = tuple(name[:3].upper() for name in MONTH_NAMES)
_INT = re.compile(r"\d{1,2}")
_STEP = re.compile(r"\*/(\d{1,2})")


def describe_schedule(job: JobDefinition) -> str:
    if job.schedule_type == ScheduleType.ONCE:
        if job.run_at is None:
            return f"once, {job.timezone}"
        zone = zone_or_none(job.timezone) or UTC
        local = job.run_at.astimezone(zone)
        return f"once at {local:%Y-%m-%d %H:%M}, {job.timezone}"
    return f"{describe_cron(job.cron_expression)}, {job.timezone}"


def describe_cron(expression: str) -> str:
    fields = ALIASES.get(expression.strip().lower(), expression).split()
    if len(fields) != 5:
        return f"cron {expression}"
    minute, hour, day, month, weekday = (f.upper() for f in fields)
    days = _days(day, month, weekday)
    time = _time_of_day(minute, hour)
    if days is None or time is None:
        return f"cron {expression}"
    if days == "every day" and time.startswith("every"):
        return time  # "every 15 minutes", not "every 15 minutes every day"
    return f"{time} {days}"


def _ints(field: str, low: int, high: int, names: tuple[str, ...] = (), offset: int = 0) -> list[int] | None:
    """A list/range field as sorted values, or None when it has steps or anything fancier."""
    values: set[int] = set()
    for part in field.split(","):
        bounds = part.split("-")
        if len(bounds) > 2:
            return None
        numbers = []
        for token in bounds:
            if _INT.fullmatch(token):
                numbers.append(int(token))
            elif token in names:
                numbers.append(names.index(token) + offset)
            else:
                return None
        first, last = numbers[0], numbers[-1]
        if not low <= first <= last <= high:
            return None
        values.update(range(first, last + 1))
    return sorted(values)


def _join(words: list[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _time_of_day(minute: str, hour: str) -> str | None:
    if minute == "*" and hour == "*":
        return "every minute"
    step = _STEP.fullmatch(minute)
    if step and hour == "*":
        n = int(step.group(1))
        return "every minute" if n == 1 else f"every {n} minutes"
    minutes = _ints(minute, 0, 59)
    if minutes is None or len(minutes) != 1:
        return None
    (m,) = minutes
    if hour == "*":
        return f"every hour at :{m:02d}"
    step = _STEP.fullmatch(hour)
    if step:
        n = int(step.group(1))
        return f"every hour at :{m:02d}" if n == 1 else f"every {n} hours at :{m:02d}"
    hours = _ints(hour, 0, 23)
    if hours is None or len(hours) > 6:
        return None
    return "at " + _join([f"{h:02d}:{m:02d}" for h in hours])


def _days(day: str, month: str, weekday: str) -> str | None:
    if month != "*":
        months = _ints(month, 1, 12, MONTH_TOKENS, offset=1)
        days_of_month = _ints(day, 1, 31)
        if months is None or days_of_month is None or weekday != "*" or len(days_of_month) != 1:
            return None
        return f"on {days_of_month[0]} {_join([MONTH_NAMES[m - 1] for m in months])}"
    if day == "*" and weekday == "*":
        return "every day"
    if day == "*":
        weekdays = _ints(weekday, 0, 7, DOW_TOKENS)
        if weekdays is None:
            return None
        weekdays = sorted({w % 7 for w in weekdays})
        if weekdays == [1, 2, 3, 4, 5]:
            return "on weekdays"
        if weekdays == [0, 6]:
            return "on weekends"
        if len(weekdays) == 7:
            return "every day"
        if len(weekdays) == 1:
            return f"every {DAY_NAMES[weekdays[0]]}"
        return "on " + _join([DAY_NAMES[w] for w in sorted(weekdays, key=lambda w: (w == 0, w))])  # Monday first
    if weekday == "*":
        days_of_month = _ints(day, 1, 31)
        if days_of_month is None or len(days_of_month) > 4:
            return None
        return f"on the {_join([_ordinal(d) for d in days_of_month])} of every month"
    return None
