"""The viewer's time zone: a choice saved in a cookie, else the browser's (set by dashboard.js), else UTC."""

import functools
from datetime import UTC, tzinfo
from zoneinfo import ZoneInfo, available_timezones

from apps.jobs.schedules import ScheduleError, parse_timezone

BROWSER_COOKIE = "chime_tz"  # written by static/dashboard/dashboard.js from Intl.DateTimeFormat
CHOICE_COOKIE = "chime_tz_choice"  # written by the preference form
COOKIE_MAX_AGE = 365 * 24 * 3600


def zone_or_none(name: str | None) -> ZoneInfo | None:
    if not name:
        return None
    try:
        return parse_timezone(name)
    except ScheduleError:
        return None


def viewer_zone_from_cookies(cookies) -> tzinfo:
    return zone_or_none(cookies.get(CHOICE_COOKIE)) or zone_or_none(cookies.get(BROWSER_COOKIE)) or UTC


def viewer_zone(request) -> tzinfo:
    return viewer_zone_from_cookies(request.COOKIES)


@functools.cache
def timezone_names() -> list[str]:
    """For the <datalist> of time zone inputs."""
    return sorted(name for name in available_timezones() if "/" in name or name == "UTC")
