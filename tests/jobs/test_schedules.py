"""Cron schedules on a local wall clock with explicit DST rules (docs/time-semantics.md).

Pure Python: no database, no Django settings needed.
"""

import itertools
import pickle
import time as clock
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, date, datetime, time, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apps.jobs.schedules import (
    CronSchedule,
    DstPolicy,
    FireTime,
    ScheduleError,
    parse_timezone,
    validate_expression,
)

BERLIN = "Europe/Berlin"
NEW_YORK = "America/New_York"
LORD_HOWE = "Australia/Lord_Howe"
ZONES = (BERLIN, NEW_YORK, LORD_HOWE)

DEFAULT = DstPolicy()
SKIP = DstPolicy(gap="skip")
BOTH = DstPolicy(overlap="both")
POLICIES = {"default": DEFAULT, "gap=skip": SKIP, "overlap=both": BOTH}

# (zone, kind, local date, first affected wall time, first wall time after the window)
TRANSITIONS = [
    (BERLIN, "gap", date(2026, 3, 29), time(2, 0), time(3, 0)),
    (BERLIN, "overlap", date(2026, 10, 25), time(2, 0), time(3, 0)),
    (BERLIN, "gap", date(2027, 3, 28), time(2, 0), time(3, 0)),
    (BERLIN, "overlap", date(2027, 10, 31), time(2, 0), time(3, 0)),
    (NEW_YORK, "gap", date(2026, 3, 8), time(2, 0), time(3, 0)),
    (NEW_YORK, "overlap", date(2026, 11, 1), time(1, 0), time(2, 0)),
    (NEW_YORK, "gap", date(2027, 3, 14), time(2, 0), time(3, 0)),
    (NEW_YORK, "overlap", date(2027, 11, 7), time(1, 0), time(2, 0)),
    (LORD_HOWE, "overlap", date(2026, 4, 5), time(1, 30), time(2, 0)),
    (LORD_HOWE, "gap", date(2026, 10, 4), time(2, 0), time(2, 30)),
    (LORD_HOWE, "overlap", date(2027, 4, 4), time(1, 30), time(2, 0)),
    (LORD_HOWE, "gap", date(2027, 10, 3), time(2, 0), time(2, 30)),
]


def utc(*args) -> datetime:
    return datetime(*args, tzinfo=UTC)


def local_day_bounds(zone: str, day: date) -> tuple[datetime, datetime]:
    """(start, end) such that start < t <= end covers exactly the local calendar day."""
    tz = ZoneInfo(zone)
    start = datetime.combine(day, time(0), tzinfo=tz).astimezone(UTC)
    end = datetime.combine(day + timedelta(days=1), time(0), tzinfo=tz).astimezone(UTC)
    return start - timedelta(microseconds=1), end - timedelta(microseconds=1)


def fires_on(schedule: CronSchedule, day: date) -> list[FireTime]:
    start, end = local_day_bounds(schedule.timezone.key, day)
    fires = schedule.between(start, end, limit=10_000)
    assert all(fire.local.date() == day for fire in fires)
    return fires


def assert_well_formed(fires: list[FireTime], after: datetime | None = None) -> None:
    """Ascending UTC, no duplicates, each local consistent with its UTC instant."""
    instants = [fire.utc for fire in fires]
    assert instants == sorted(set(instants)), "not strictly ascending"
    if after is not None and instants:
        assert instants[0] > after
    for fire in fires:
        assert fire.utc.tzinfo is UTC
        assert isinstance(fire.local.tzinfo, ZoneInfo)
        assert fire.local.utcoffset() is not None
        assert fire.local.astimezone(UTC) == fire.utc
        assert fire.utc.astimezone(fire.local.tzinfo).fold == fire.local.fold


def transition_instants(zone: str, year: int) -> list[tuple[datetime, timedelta, timedelta]]:
    """(UTC instant, offset before, offset after) of each offset change in `year`, from zoneinfo."""
    tz = ZoneInfo(zone)
    found = []
    t = utc(year, 1, 1)
    offset = t.astimezone(tz).utcoffset()
    while t.year == year:
        nxt = t + timedelta(hours=1)
        if nxt.astimezone(tz).utcoffset() != offset:
            lo, hi = t, nxt
            while hi - lo > timedelta(seconds=1):
                mid = lo + (hi - lo) / 2
                lo, hi = (mid, hi) if mid.astimezone(tz).utcoffset() == offset else (lo, mid)
            after = hi.astimezone(tz).utcoffset()
            found.append((hi, offset, after))
            offset = after
        t = nxt
    return found


# --------------------------------------------------------------------------- the calendar itself


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize("year", [2026, 2027])
def test_it_uses_the_transition_dates_the_tz_database_has(zone, year):
    expected = sorted(
        (day, kind, start, end) for z, kind, day, start, end in TRANSITIONS if z == zone and day.year == year
    )
    actual = []
    for instant, before, after in transition_instants(zone, year):
        kind = "gap" if after > before else "overlap"
        start = (instant + before).replace(tzinfo=None)  # the wall clock just before the change
        end = (instant + after).replace(tzinfo=None)  # ... and just after it
        window = (start.time(), end.time()) if kind == "gap" else (end.time(), start.time())
        actual.append((start.date(), kind, *window))
    assert actual == expected


# --------------------------------------------------------------------------- fixed-time jobs

GAP_CASES = [
    # zone, gap day, job (wall time inside the gap), shifted UTC instant, shifted local wall time
    (BERLIN, date(2026, 3, 29), "30 2 * * *", utc(2026, 3, 29, 1, 0), time(3, 0)),
    (BERLIN, date(2027, 3, 28), "30 2 * * *", utc(2027, 3, 28, 1, 0), time(3, 0)),
    (NEW_YORK, date(2026, 3, 8), "30 2 * * *", utc(2026, 3, 8, 7, 0), time(3, 0)),
    (NEW_YORK, date(2027, 3, 14), "30 2 * * *", utc(2027, 3, 14, 7, 0), time(3, 0)),
    (LORD_HOWE, date(2026, 10, 4), "15 2 * * *", utc(2026, 10, 3, 15, 30), time(2, 30)),
    (LORD_HOWE, date(2027, 10, 3), "15 2 * * *", utc(2027, 10, 2, 15, 30), time(2, 30)),
]

OVERLAP_CASES = [
    # zone, overlap day, job (wall time inside the overlap), first instant, second instant
    (BERLIN, date(2026, 10, 25), "30 2 * * *", utc(2026, 10, 25, 0, 30), utc(2026, 10, 25, 1, 30)),
    (BERLIN, date(2027, 10, 31), "30 2 * * *", utc(2027, 10, 31, 0, 30), utc(2027, 10, 31, 1, 30)),
    (NEW_YORK, date(2026, 11, 1), "30 1 * * *", utc(2026, 11, 1, 5, 30), utc(2026, 11, 1, 6, 30)),
    (NEW_YORK, date(2027, 11, 7), "30 1 * * *", utc(2027, 11, 7, 5, 30), utc(2027, 11, 7, 6, 30)),
    (LORD_HOWE, date(2026, 4, 5), "45 1 * * *", utc(2026, 4, 4, 14, 45), utc(2026, 4, 4, 15, 15)),
    (LORD_HOWE, date(2027, 4, 4), "45 1 * * *", utc(2027, 4, 3, 14, 45), utc(2027, 4, 3, 15, 15)),
]


@pytest.mark.parametrize("policy_name", POLICIES)
@pytest.mark.parametrize(("zone", "day", "expression", "shifted_utc", "shifted_wall"), GAP_CASES)
def test_it_applies_the_gap_policy_to_a_fixed_time_job(zone, day, expression, shifted_utc, shifted_wall, policy_name):
    schedule = CronSchedule.parse(expression, zone, POLICIES[policy_name])
    assert schedule.is_fixed_time
    fires = fires_on(schedule, day)
    if policy_name == "gap=skip":
        assert fires == []
    else:  # the overlap setting does not matter in a gap
        assert [(f.utc, f.local.time(), f.dst) for f in fires] == [(shifted_utc, shifted_wall, "gap")]
    for neighbour in (day - timedelta(days=1), day + timedelta(days=1)):
        [fire] = fires_on(schedule, neighbour)
        assert fire.dst is None
        assert fire.local.strftime("%M %-H") == " ".join(expression.split()[:2])


@pytest.mark.parametrize("policy_name", POLICIES)
@pytest.mark.parametrize(("zone", "day", "expression", "first_utc", "second_utc"), OVERLAP_CASES)
def test_it_applies_the_overlap_policy_to_a_fixed_time_job(zone, day, expression, first_utc, second_utc, policy_name):
    schedule = CronSchedule.parse(expression, zone, POLICIES[policy_name])
    fires = fires_on(schedule, day)
    expected = [(first_utc, 0, "overlap")]
    if policy_name == "overlap=both":
        expected.append((second_utc, 1, "overlap"))
    assert [(f.utc, f.local.fold, f.dst) for f in fires] == expected
    wall = " ".join(expression.split()[:2])
    assert all(f.local.strftime("%M %-H") == wall for f in fires)
    assert_well_formed(fires)


def test_it_fires_a_fixed_time_job_in_a_zone_without_dst_at_plain_wall_time():
    schedule = CronSchedule.parse("30 2 * * *", "UTC")
    fires = schedule.preview(utc(2026, 3, 28), 3)
    assert [f.utc for f in fires] == [utc(2026, 3, 28, 2, 30), utc(2026, 3, 29, 2, 30), utc(2026, 3, 30, 2, 30)]
    assert [f.dst for f in fires] == [None, None, None]


def test_it_fires_once_when_several_wall_times_shift_onto_the_same_instant():
    berlin_gap = utc(2026, 3, 29, 1, 0)  # 03:00 CEST
    schedule = CronSchedule.parse("0,15,30,45 2 * * *", BERLIN)
    assert [(f.utc, f.dst) for f in fires_on(schedule, date(2026, 3, 29))] == [(berlin_gap, "gap")]

    # 02:00 and 02:30 shift onto 03:00, which the job names itself: one unflagged fire.
    schedule = CronSchedule.parse("0,30 2,3 * * *", BERLIN)
    fires = fires_on(schedule, date(2026, 3, 29))
    assert [(f.utc, f.dst) for f in fires] == [(berlin_gap, None), (berlin_gap + timedelta(minutes=30), None)]


@pytest.mark.parametrize(
    ("expression", "fixed"),
    [
        ("30 2 * * *", True),
        ("0 9 * * MON-FRI", True),
        ("0,30 8-18 * * *", True),
        ("@daily", True),
        ("@weekly", True),
        ("0 * * * *", False),
        ("*/15 * * * *", False),
        ("@hourly", False),
        ("0 */2 * * *", False),
        ("*/5 9 * * *", False),
        ("* 9 * * *", False),
    ],
)
def test_it_classifies_fixed_time_and_frequent_jobs(expression, fixed):
    assert CronSchedule.parse(expression, BERLIN).is_fixed_time is fixed


# --------------------------------------------------------------------------- whole-year property

WALL_TIMES = [time(0, 0), time(1, 30), time(1, 45), time(2, 0), time(2, 15), time(2, 30), time(23, 59)]


def window_contains(zone: str, kind: str, wall: time) -> Iterator[date]:
    """The day (in the year under test) on which `wall` falls in a gap/overlap of `zone`, if any."""
    for z, k, day, start, end in TRANSITIONS:
        if z == zone and k == kind and start <= wall < end:
            yield day


@pytest.mark.parametrize("policy_name", POLICIES)
@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize("year", [2026, 2027])
def test_it_fires_a_daily_job_once_per_local_day_all_year(zone, year, policy_name):
    policy = POLICIES[policy_name]
    tz = ZoneInfo(zone)
    days = [date(year, 1, 1) + timedelta(days=i) for i in range((date(year + 1, 1, 1) - date(year, 1, 1)).days)]
    start = datetime(year, 1, 1, tzinfo=tz).astimezone(UTC) - timedelta(microseconds=1)
    end = datetime(year + 1, 1, 1, tzinfo=tz).astimezone(UTC) - timedelta(microseconds=1)
    for wall in WALL_TIMES:
        schedule = CronSchedule.parse(f"{wall.minute} {wall.hour} * * *", zone, policy)
        fires = schedule.between(start, end, limit=1000)
        assert_well_formed(fires)
        per_day = Counter(fire.local.date() for fire in fires)
        gap_days = {d for d in window_contains(zone, "gap", wall) if d.year == year}
        overlap_days = {d for d in window_contains(zone, "overlap", wall) if d.year == year}
        expected = {day: 1 for day in days}
        if policy.gap == "skip":
            expected.update(dict.fromkeys(gap_days, 0))
        if policy.overlap == "both":
            expected.update(dict.fromkeys(overlap_days, 2))
        assert {day: per_day[day] for day in days} == expected, (wall, zone)
        assert set(per_day) <= set(days)
        flags = Counter(fire.dst for fire in fires)
        assert flags["gap"] == (0 if policy.gap == "skip" else len(gap_days))
        assert flags["overlap"] == len(overlap_days) * (2 if policy.overlap == "both" else 1)


# --------------------------------------------------------------------------- frequent jobs


def expected_count(expression: str, zone: str, kind: str | None) -> int:
    per_day = {"0 * * * *": 24, "*/15 * * * *": 96}[expression]
    if kind is None:
        return per_day
    start, end = next((s, e) for z, k, _, s, e in TRANSITIONS if z == zone and k == kind)
    minutes = [t for t in range(24 * 60) if (t % 60 == 0 if expression == "0 * * * *" else t % 15 == 0)]
    inside = sum(1 for t in minutes if start <= time(t // 60, t % 60) < end)
    return per_day - inside if kind == "gap" else per_day + inside


@pytest.mark.parametrize("policy_name", POLICIES)
@pytest.mark.parametrize("expression", ["0 * * * *", "*/15 * * * *"])
@pytest.mark.parametrize(("zone", "kind", "day"), [(z, k, d) for z, k, d, _, _ in TRANSITIONS])
def test_it_fires_frequent_jobs_by_real_elapsed_time(zone, kind, day, expression, policy_name):
    schedule = CronSchedule.parse(expression, zone, POLICIES[policy_name])  # the policy must not matter
    assert not schedule.is_fixed_time
    fires = fires_on(schedule, day)
    assert_well_formed(fires)
    assert len(fires) == expected_count(expression, zone, kind)
    assert {f.dst for f in fires} <= ({None, "overlap"} if kind == "overlap" else {None})
    tz = ZoneInfo(zone)
    for fire in fires:  # exactly the wall times named, each at an instant whose wall clock shows it
        assert fire.local.second == 0 and fire.local.minute % 15 == 0
        assert expression != "0 * * * *" or fire.local.minute == 0
        ambiguous = fire.local.replace(fold=1 - fire.local.fold).utcoffset() != fire.local.utcoffset()
        assert (fire.dst == "overlap") == ambiguous
    # Brute force: every UTC minute of the day whose local wall clock matches, and nothing else.
    start, end = local_day_bounds(zone, day)
    t = start.replace(second=0, microsecond=0) + timedelta(minutes=1)
    expected = []
    while t <= end:
        wall = t.astimezone(tz)
        if wall.minute % (60 if expression == "0 * * * *" else 15) == 0:
            expected.append(t)
        t += timedelta(minutes=1)
    assert [f.utc for f in fires] == expected
    if expression == "*/15 * * * *":  # Lord Howe's 30-minute shift keeps the 15-minute grid too
        assert {b.utc - a.utc for a, b in itertools.pairwise(fires)} == {timedelta(minutes=15)}


@pytest.mark.parametrize(
    ("zone", "day", "expected"),
    [
        (BERLIN, date(2026, 3, 28), 24),
        (BERLIN, date(2026, 3, 29), 23),
        (BERLIN, date(2026, 10, 25), 25),
        (NEW_YORK, date(2026, 11, 1), 25),
        (LORD_HOWE, date(2026, 10, 4), 23),
        (LORD_HOWE, date(2026, 4, 5), 24),  # the 01:30-02:00 overlap holds no full hour
    ],
)
def test_it_counts_hourly_fires_per_local_day(zone, day, expected):
    assert len(fires_on(CronSchedule.parse("0 * * * *", zone), day)) == expected


def test_it_skips_exactly_two_quarter_hours_in_the_lord_howe_gap():
    fires = fires_on(CronSchedule.parse("*/15 * * * *", LORD_HOWE), date(2026, 10, 4))
    assert len(fires) == 96 - 2
    walls = {f.local.strftime("%H:%M") for f in fires}
    assert "02:00" not in walls and "02:15" not in walls and {"01:45", "02:30"} <= walls


def test_it_fires_an_hourly_job_twice_at_new_york_one_am_on_the_overlap_day():
    fires = CronSchedule.parse("0 * * * *", NEW_YORK).between(utc(2026, 11, 1, 4), utc(2026, 11, 1, 7), 10)
    assert [(f.utc, f.local.strftime("%H:%M %Z"), f.dst) for f in fires] == [
        (utc(2026, 11, 1, 5), "01:00 EDT", "overlap"),
        (utc(2026, 11, 1, 6), "01:00 EST", "overlap"),
        (utc(2026, 11, 1, 7), "02:00 EST", None),
    ]


# --------------------------------------------------------------------------- zones without DST


@pytest.mark.parametrize(
    ("zone", "offset"),
    [("UTC", timedelta(0)), ("Etc/GMT+5", timedelta(hours=-5)), ("Etc/GMT-14", timedelta(hours=14)),
     ("Asia/Kolkata", timedelta(hours=5, minutes=30))],
)  # fmt: skip
def test_it_handles_utc_and_fixed_offset_zones(zone, offset):
    schedule = CronSchedule.parse("0 * * * *", zone)
    fires = schedule.between(utc(2026, 1, 1), utc(2027, 1, 1), limit=10_000)
    assert len(fires) == 8760
    assert {f.dst for f in fires} == {None}
    assert {f.local.utcoffset() for f in fires} == {offset}
    assert {b.utc - a.utc for a, b in itertools.pairwise(fires)} == {timedelta(hours=1)}
    nine = CronSchedule.parse("0 9 * * *", zone).next_after(utc(2026, 6, 1) - offset)
    assert nine == utc(2026, 6, 1, 9) - offset


# --------------------------------------------------------------------------- expressions


@pytest.mark.parametrize(
    ("alias", "expected_utc"),
    [
        ("@hourly", utc(2026, 1, 7, 11)),
        ("@daily", utc(2026, 1, 8)),
        ("@midnight", utc(2026, 1, 8)),
        ("@weekly", utc(2026, 1, 11)),  # Sunday
        ("@monthly", utc(2026, 2, 1)),
        ("@yearly", utc(2027, 1, 1)),
        ("@annually", utc(2027, 1, 1)),
        ("@DAILY", utc(2026, 1, 8)),
    ],
)
def test_it_accepts_aliases(alias, expected_utc):
    schedule = CronSchedule.parse(alias, "UTC")
    assert schedule.expression == alias.lower()
    assert schedule.is_fixed_time is (alias != "@hourly")
    assert schedule.next_after(utc(2026, 1, 7, 10, 30)) == expected_utc


@pytest.mark.parametrize(
    ("expression", "normalized"),
    [
        ("  0   9 * *   mon-fri ", "0 9 * * MON-FRI"),
        ("0 9 * jan,jul sun", "0 9 * JAN,JUL SUN"),
        ("*/15 * * * *", "*/15 * * * *"),
        # Kept as written: an equal range is its one value (croniter, which Chime used until
        # issue #11, widened it to the whole field, so Chime rewrote it).
        ("30 2-2 * * *", "30 2-2 * * *"),
        ("0 9 * * MON-MON", "0 9 * * MON-MON"),
        ("5-5/10 * * * *", "5-5/10 * * * *"),
        ("0 0 L * *", "0 0 L * *"),
    ],
)
def test_it_normalizes_expressions(expression, normalized):
    assert validate_expression(expression) == normalized
    assert validate_expression(normalized) == normalized


def test_it_reads_an_equal_range_as_one_value_not_the_whole_field():
    fires = CronSchedule.parse("30 2-2 * * *", "UTC").preview(utc(2026, 1, 1), 3)
    assert [f.utc for f in fires] == [utc(2026, 1, 1, 2, 30), utc(2026, 1, 2, 2, 30), utc(2026, 1, 3, 2, 30)]


def test_it_ors_day_of_month_and_day_of_week():
    fires = CronSchedule.parse("0 0 13 * FRI", "UTC").between(utc(2026, 2, 1), utc(2026, 3, 31), 100)
    days = [f.utc.day for f in fires]
    assert days == [6, 13, 20, 27, 6, 13, 20, 27]  # Feb 13 2026 is a Friday; Mar 13 is one too
    fires = CronSchedule.parse("0 0 1 * MON", "UTC").between(utc(2026, 3, 1), utc(2026, 4, 30), 100)
    assert [(f.utc.month, f.utc.day) for f in fires] == [
        (3, 2), (3, 9), (3, 16), (3, 23), (3, 30), (4, 1), (4, 6), (4, 13), (4, 20), (4, 27),
    ]  # fmt: skip
    # With one side '*' only the other restricts.
    fires = CronSchedule.parse("0 0 * * MON", "UTC").preview(utc(2026, 3, 1), 2)
    assert [f.utc.day for f in fires] == [2, 9]


@pytest.mark.parametrize(
    ("expression", "fragment"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("* * * * * *", "seconds are not supported"),
        ("0 0 * * * *", "seconds are not supported"),
        ("0 0 0 * * * 2026", "seconds and years are not supported"),
        ("@reboot", "@reboot is not supported"),
        ("@every 5m", "Unknown alias"),
        ("garbage", "exactly 5 fields"),
        ("* * * *", "exactly 5 fields"),
        ("a b c d e", "Invalid minute field 'a'"),
        ("61 * * * *", "minute field '61': 61 is out of range (0-59)"),
        ("0 24 * * *", "hour field '24': 24 is out of range (0-23)"),
        ("0 0 32 * *", "day-of-month field '32': 32 is out of range (1-31)"),
        ("0 0 0 * *", "day-of-month field '0': 0 is out of range (1-31)"),
        ("0 0 * 13 *", "month field '13': 13 is out of range (1-12)"),
        ("0 0 * * 8", "day-of-week field '8': 8 is out of range (0-7)"),
        ("0 0 * FOO *", "Invalid month field 'FOO'"),
        ("*/0 * * * *", "step must be at least 1"),
        ("0 0 * * 1#6", "'#6' must be between #1 and #5"),
        ("H * * * *", "H (hashed) and R (random)"),
        ("R 3 * * *", "H (hashed) and R (random)"),
        ("0 0 30 2 *", "never fires: February has no 30th"),
        ("0 0 31 4,6,9,11 *", "never fires"),
        ("0 0 *\u00a0* MON", "not allowed"),
        ("0 " * 120, "too long"),
    ],
)
def test_it_rejects_invalid_expressions_with_a_helpful_message(expression, fragment):
    with pytest.raises(ScheduleError) as caught:
        validate_expression(expression)
    assert caught.value.field == "expression"
    assert fragment in caught.value.message
    assert str(caught.value) == caught.value.message
    with pytest.raises(ScheduleError):
        CronSchedule.parse(expression, "UTC")


@pytest.mark.parametrize("expression", [None, 5, b"* * * * *", ["* * * * *"]])
def test_it_rejects_non_string_expressions(expression):
    with pytest.raises(ScheduleError) as caught:
        CronSchedule.parse(expression, "UTC")
    assert caught.value.field == "expression"


@pytest.mark.parametrize(
    ("expression", "expected_local"),
    [
        ("0 0 L * *", ["2026-03-31 00:00", "2026-04-30 00:00"]),  # last day of the month
        ("0 0 15W * *", ["2026-03-16 00:00", "2026-04-15 00:00"]),  # weekday nearest the 15th
        ("0 0 ? * MON", ["2026-03-02 00:00", "2026-03-09 00:00"]),
        ("0 0 * * L5", ["2026-03-27 00:00", "2026-04-24 00:00"]),  # last Friday
        ("30 2 * * 0#5", ["2026-03-29 03:00", "2026-05-31 02:30"]),  # 5th Sunday; Berlin's gap day first
    ],
)
def test_it_accepts_croniters_extensions(expression, expected_local):
    schedule = CronSchedule.parse(expression, BERLIN)
    assert schedule.is_fixed_time
    fires = schedule.preview(utc(2026, 3, 1), 2)
    assert [f.local.strftime("%Y-%m-%d %H:%M") for f in fires] == expected_local


def test_it_accepts_a_leap_day_job_and_finds_the_next_leap_year():
    schedule = CronSchedule.parse("0 12 29 2 *", BERLIN)
    assert schedule.next_after(utc(2026, 1, 1)) == utc(2028, 2, 29, 11)
    assert schedule.next_after(utc(2096, 3, 1)) == utc(2104, 2, 29, 11)  # 2100 is not a leap year


# --------------------------------------------------------------------------- time zones


@pytest.mark.parametrize("name", [BERLIN, NEW_YORK, LORD_HOWE, "UTC", "Etc/GMT+5", "America/Port-au-Prince"])
def test_it_parses_iana_time_zones(name):
    assert parse_timezone(name) == ZoneInfo(name)
    assert CronSchedule.parse("0 9 * * *", name).timezone.key == name


@pytest.mark.parametrize(
    "name",
    ["", " ", "Mars/Olympus_Mons", "../etc", "../../etc/passwd", "/etc/localtime", "Europe/../Europe/Berlin",
     "europe/berlin", "Europe/Berlin ", "localtime", "posixrules", "Europe//Berlin", "zone.tab", None, 5, ["UTC"]],
)  # fmt: skip
def test_it_rejects_unknown_time_zones(name):
    with pytest.raises(ScheduleError) as caught:
        parse_timezone(name)
    assert caught.value.field == "timezone"
    assert caught.value.message == f"Unknown time zone '{name}'. Use an IANA name such as Europe/Berlin."
    with pytest.raises(ScheduleError) as caught:
        CronSchedule.parse("0 9 * * *", name)
    assert caught.value.field == "timezone"


# --------------------------------------------------------------------------- DST policy


def test_it_builds_dst_policies_from_dicts():
    assert DstPolicy.from_dict(None) == DstPolicy() == DstPolicy.from_dict({})
    assert DstPolicy().to_dict() == {"gap": "shift", "overlap": "first"}
    policy = DstPolicy.from_dict({"gap": "skip", "overlap": "both"})
    assert (policy.gap, policy.overlap) == ("skip", "both")
    assert DstPolicy.from_dict(policy.to_dict()) == policy
    assert CronSchedule.parse("30 2 * * *", BERLIN, policy).dst_policy == policy


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"gap": "later"}, "dst_policy.gap"),
        ({"gap": None}, "dst_policy.gap"),
        ({"overlap": "twice"}, "dst_policy.overlap"),
        ({"overlap": 2}, "dst_policy.overlap"),
        ({"gaps": "skip"}, "dst_policy"),
        ("shift", "dst_policy"),
    ],
)
def test_it_rejects_invalid_dst_policies(value, field):
    with pytest.raises(ScheduleError) as caught:
        DstPolicy.from_dict(value)
    assert caught.value.field == field
    assert caught.value.message


def test_it_pickles_errors_schedules_and_fire_times():
    error = pickle.loads(pickle.dumps(ScheduleError("timezone", "nope")))  # noqa: S301 (our own bytes)
    assert (error.field, error.message, str(error)) == ("timezone", "nope", "nope")
    assert isinstance(error, ValueError)
    schedule = CronSchedule.parse("30 2 * * *", BERLIN, SKIP)
    assert pickle.loads(pickle.dumps(schedule)) == schedule  # noqa: S301
    fire = schedule.preview(utc(2026, 1, 1), 1)[0]
    assert pickle.loads(pickle.dumps(fire)) == fire  # noqa: S301


# --------------------------------------------------------------------------- queries


def test_it_returns_next_after_strictly_after_in_utc():
    schedule = CronSchedule.parse("*/15 * * * *", BERLIN)
    assert schedule.next_after(utc(2026, 5, 1, 10, 0)) == utc(2026, 5, 1, 10, 15)
    assert schedule.next_after(utc(2026, 5, 1, 10, 0, 0, 1)) == utc(2026, 5, 1, 10, 15)
    assert schedule.next_after(utc(2026, 5, 1, 9, 59, 59)) == utc(2026, 5, 1, 10, 0)
    in_berlin = datetime(2026, 5, 1, 12, 0, tzinfo=ZoneInfo(BERLIN))  # any aware datetime will do
    result = schedule.next_after(in_berlin)
    assert result == utc(2026, 5, 1, 10, 15) and result.tzinfo is UTC
    assert schedule.next_after(datetime(2026, 5, 1, 10, tzinfo=timezone(timedelta(hours=-3)))) == utc(
        2026, 5, 1, 13, 15
    )


def test_it_rejects_naive_datetimes():
    schedule = CronSchedule.parse("* * * * *", "UTC")
    with pytest.raises(ScheduleError) as caught:
        schedule.next_after(datetime(2026, 1, 1))
    assert caught.value.field == "start"
    with pytest.raises(ScheduleError):
        schedule.iter_after(datetime(2026, 1, 1))
    with pytest.raises(ScheduleError) as caught:
        schedule.between(utc(2026, 1, 1), datetime(2026, 1, 2), 10)
    assert caught.value.field == "end"


def test_it_caches_parsed_schedules_and_next_fire_times():
    first = CronSchedule.parse("0 9 * * MON-FRI", BERLIN)
    assert CronSchedule.parse("0 9 * * MON-FRI", BERLIN) is first
    assert CronSchedule.parse("0 9 * * MON-FRI", BERLIN, DstPolicy()) is first
    assert CronSchedule.parse("0 9 * * MON-FRI", BERLIN, BOTH) != first
    assert first == CronSchedule("0  9 * * mon-fri", BERLIN) and hash(first) == hash(
        CronSchedule("0 9 * * MON-FRI", BERLIN)
    )
    after = utc(2026, 5, 1, 12)
    assert first.next_after(after) is first.next_after(after)


def test_it_is_fast_enough_for_the_hot_path():
    schedules = [CronSchedule.parse(e, z) for e in ("*/5 * * * *", "30 2 * * *", "0 9 * * 1-5") for z in ZONES]
    afters = [utc(2026, 10, 24) + timedelta(seconds=17 * i) for i in range(3000)]
    started = clock.perf_counter()
    for i, after in enumerate(afters):
        assert schedules[i % len(schedules)].next_after(after) > after
    assert clock.perf_counter() - started < 1.5  # ~20µs each uncached: 100k in about two seconds


@pytest.mark.parametrize("fold", [0, 1])
def test_it_starts_inside_an_overlap_on_either_fold(fold):
    tz = ZoneInfo(NEW_YORK)
    after = datetime(2026, 11, 1, 1, 20, fold=fold, tzinfo=tz)  # 05:20 UTC (EDT) or 06:20 UTC (EST)
    fires = CronSchedule.parse("*/15 * * * *", NEW_YORK).preview(after, 5)
    assert_well_formed(fires, after)
    if fold == 0:
        expected = [(1, 30, 0), (1, 45, 0), (1, 0, 1), (1, 15, 1), (1, 30, 1)]
    else:  # the first pass is over: its 01:30 and 01:45 must not come back
        expected = [(1, 30, 1), (1, 45, 1), (2, 0, 0), (2, 15, 0), (2, 30, 0)]
    assert [(f.local.hour, f.local.minute, f.local.fold) for f in fires] == expected

    both = CronSchedule.parse("30 1 * * *", NEW_YORK, BOTH).next_after(after)
    first = CronSchedule.parse("30 1 * * *", NEW_YORK).next_after(after)
    if fold == 0:
        assert both == first == utc(2026, 11, 1, 5, 30)
    else:
        assert both == utc(2026, 11, 1, 6, 30)
        assert first == utc(2026, 11, 2, 6, 30)  # "first" fires once, and that was at 05:30 UTC


def test_it_starts_late_in_an_overlap_on_the_first_pass():
    after = datetime(2026, 10, 25, 2, 50, tzinfo=ZoneInfo(BERLIN))  # 00:50 UTC, fold=0
    fires = CronSchedule.parse("*/30 * * * *", BERLIN).preview(after, 4)
    assert [f.utc for f in fires] == [
        utc(2026, 10, 25, 1),
        utc(2026, 10, 25, 1, 30),
        utc(2026, 10, 25, 2),
        utc(2026, 10, 25, 2, 30),
    ]
    assert [f.local.strftime("%H:%M %Z") for f in fires] == ["02:00 CET", "02:30 CET", "03:00 CET", "03:30 CET"]


def test_it_starts_inside_a_gap():
    tz = ZoneInfo(BERLIN)
    fixed = CronSchedule.parse("30 2 * * *", BERLIN)
    # A nonexistent wall time names an instant the PEP 495 way: fold=0 uses the old offset.
    assert fixed.next_after(datetime(2026, 3, 29, 2, 15, tzinfo=tz)) == utc(2026, 3, 30, 0, 30)  # 03:15 CEST
    assert fixed.next_after(datetime(2026, 3, 29, 2, 15, fold=1, tzinfo=tz)) == utc(2026, 3, 29, 1)  # 01:15 CET
    assert fixed.next_after(utc(2026, 3, 29, 0, 59)) == utc(2026, 3, 29, 1)
    assert fixed.next_after(utc(2026, 3, 29, 1)) == utc(2026, 3, 30, 0, 30)
    frequent = CronSchedule.parse("*/15 * * * *", BERLIN)
    assert frequent.next_after(datetime(2026, 3, 29, 2, 10, tzinfo=tz)) == utc(2026, 3, 29, 1, 15)


def test_it_flags_dst_in_previews():
    fixed = CronSchedule.parse("30 2 * * *", BERLIN)
    assert [f.dst for f in fixed.preview(utc(2026, 3, 27), 4)] == [None, None, "gap", None]
    assert [f.dst for f in fixed.preview(utc(2026, 10, 24), 3)] == [None, "overlap", None]
    both = CronSchedule.parse("30 2 * * *", BERLIN, BOTH).preview(utc(2026, 10, 24), 4)
    assert [(f.dst, f.local.fold) for f in both] == [(None, 0), ("overlap", 0), ("overlap", 1), (None, 0)]
    assert_well_formed(both)
    [gap] = [f for f in fixed.preview(utc(2026, 3, 27), 4) if f.dst == "gap"]
    assert gap.local.strftime("%Y-%m-%d %H:%M %Z") == "2026-03-29 03:00 CEST"


def test_it_bounds_between_and_preview():
    schedule = CronSchedule.parse("0 * * * *", "UTC")
    fires = schedule.between(utc(2026, 1, 1, 0), utc(2026, 1, 1, 3), 10)
    assert [f.utc.hour for f in fires] == [1, 2, 3]  # start excluded, end included
    assert len(schedule.between(utc(2026, 1, 1), utc(2026, 2, 1), 5)) == 5
    assert schedule.between(utc(2026, 1, 1), utc(2026, 1, 1), 5) == []
    assert schedule.between(utc(2026, 1, 1), utc(2026, 1, 2), 0) == []
    assert len(schedule.preview(utc(2026, 1, 1), 1000)) == 1000
    with pytest.raises(ScheduleError) as caught:
        schedule.between(utc(2026, 1, 2), utc(2026, 1, 1), 5)
    assert caught.value.field == "start"
    for bad in (-1, 1.5, None):
        with pytest.raises(ScheduleError) as caught:
            schedule.between(utc(2026, 1, 1), utc(2026, 1, 2), bad)
        assert caught.value.field == "count"
    for bad in (0, 1001, True, "5"):
        with pytest.raises(ScheduleError) as caught:
            schedule.preview(utc(2026, 1, 1), bad)
        assert caught.value.field == "count"


def test_it_returns_none_when_there_is_no_next_fire_time():
    assert CronSchedule.parse("* * * * *", "UTC").next_after(datetime.max.replace(tzinfo=UTC)) is None
    assert CronSchedule.parse("0 12 29 2 *", BERLIN).next_after(utc(9996, 3, 1)) is None
    assert list(CronSchedule.parse("0 0 1 1 *", LORD_HOWE).iter_after(utc(9999, 6, 1))) == []


def test_a_fixed_time_job_fires_once_on_the_fall_back_day():
    # croniter's aware mode fires 02:30 twice here (00:30 and 01:30 UTC); Chime's default is once.
    tz = ZoneInfo(BERLIN)
    ours = CronSchedule.parse("30 2 * * *", BERLIN).preview(datetime(2026, 10, 24, 12, tzinfo=tz), 2)
    assert [f.utc for f in ours] == [utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)]


# --------------------------------------------------------------------------- hypothesis


@st.composite
def cron_field(draw, low: int, high: int):
    """(text, values) for one field from a small grammar: *, */s, a, a-b, a-b/s, lists."""

    def item():
        kind = draw(st.sampled_from(["value", "range", "step", "range-step"]))
        a = draw(st.integers(low, high))
        if kind == "value":
            return str(a), {a}
        b = draw(st.integers(a, high))
        s = draw(st.integers(1, max(1, (high - low) // 2)))
        if kind == "range":
            return f"{a}-{b}", set(range(a, b + 1))
        if kind == "step":
            return f"*/{s}", set(range(low, high + 1, s))
        return f"{a}-{b}/{s}", set(range(a, b + 1, s))

    if draw(st.integers(0, 3)) == 0:
        return "*", set(range(low, high + 1))
    items = [item() for _ in range(draw(st.integers(1, 2)))]
    return ",".join(text for text, _ in items), set().union(*(values for _, values in items))


@st.composite
def cron_expressions(draw):
    if draw(st.booleans()):  # daily jobs around the transition hours, to hit gaps and overlaps often
        minutes = sorted(draw(st.sets(st.sampled_from([0, 15, 30, 45, 59]), min_size=1, max_size=2)))
        hours = sorted(draw(st.sets(st.sampled_from([1, 2, 3]), min_size=1, max_size=2)))
        fields = [
            (",".join(map(str, minutes)), set(minutes)),
            (",".join(map(str, hours)), set(hours)),
            ("*", set(range(1, 32))),
            ("*", set(range(1, 13))),
            ("*", set(range(7))),
        ]
    else:
        fields = [
            draw(cron_field(0, 59)),
            draw(cron_field(0, 23)),
            draw(cron_field(1, 31)),
            draw(cron_field(1, 12)),
            draw(cron_field(0, 6)),
        ]
    return " ".join(text for text, _ in fields), [values for _, values in fields]


def wall_matches(fields, texts, wall: datetime) -> bool:
    """Independent matcher, with Chime's day rule: OR when both day fields are restricted."""
    minutes, hours, days, months, weekdays = fields
    dom_text, dow_text = texts[2], texts[4]
    dom_star = dom_text == "*" or (len(days) == 31 and "*" in dow_text)
    dow_star = dow_text == "*" or (len(weekdays) == 7 and "*" in dom_text)
    dom_ok, dow_ok = wall.day in days, wall.isoweekday() % 7 in weekdays
    day_ok = (dom_ok or dow_ok) if not dom_star and not dow_star else (dom_ok and dow_ok)
    return wall.minute in minutes and wall.hour in hours and wall.month in months and day_ok


HYPOTHESIS_ZONES = [BERLIN, NEW_YORK, LORD_HOWE, "UTC", "Asia/Kolkata", "Pacific/Chatham", "America/St_Johns"]
NEAR_TRANSITIONS = {
    zone: [instant for year in (2026, 2027) for instant, _, _ in transition_instants(zone, year)]
    for zone in HYPOTHESIS_ZONES
}


@st.composite
def zones_and_starts(draw):
    """A zone and a start instant, mostly shortly before one of the zone's transitions."""
    zone = draw(st.sampled_from(HYPOTHESIS_ZONES))
    if NEAR_TRANSITIONS[zone] and draw(st.integers(0, 3)) > 0:
        anchor = draw(st.sampled_from(NEAR_TRANSITIONS[zone]))
        after = anchor - timedelta(minutes=draw(st.integers(-60, 30 * 60)), seconds=draw(st.integers(0, 59)))
    else:
        after = utc(2026, 1, 1) + timedelta(minutes=draw(st.integers(0, 2 * 365 * 24 * 60)))
    return zone, after


@settings(max_examples=100, deadline=None)
@given(cron_expressions(), zones_and_starts(), st.sampled_from(list(POLICIES.values())))
def test_it_yields_ascending_matching_fire_times_for_random_expressions(expression, zone_and_start, policy):
    text, fields = expression
    zone, after = zone_and_start
    try:
        schedule = CronSchedule.parse(text, zone, policy)
    except ScheduleError:
        return  # e.g. "0 0 31 2 *"
    fires = list(itertools.islice(schedule.iter_after(after), 40))
    assert fires, text
    assert_well_formed(fires, after)
    texts = schedule.expression.split()
    for fire in fires:
        local = fire.local
        ambiguous = local.replace(fold=1 - local.fold).utcoffset() != local.utcoffset()
        if fire.dst == "gap":
            assert schedule.is_fixed_time and policy.gap == "shift"
            just_before = (fire.utc - timedelta(seconds=1)).astimezone(schedule.timezone)
            assert just_before.utcoffset() < local.utcoffset()  # fired right at a spring-forward
            continue
        assert wall_matches(fields, texts, local), (text, zone, local)
        assert (fire.dst == "overlap") == ambiguous
        if ambiguous and local.fold == 1:
            assert not schedule.is_fixed_time or policy.overlap == "both"
    assert schedule.next_after(after) == fires[0].utc
