"""Property tests (hypothesis) over cron expressions and time zones, through the API:
never a 5xx, and every accepted schedule has a next fire time or a clear reason why not."""

from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.django_db

ZONES = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "Asia/Kolkata",
    "Pacific/Chatham",
    "America/St_Johns",
    "Pacific/Apia",
    "Africa/Casablanca",
    "Antarctica/Troll",
]


def field(low: int, high: int):
    value = st.integers(low, high).map(str)
    rng = st.tuples(st.integers(low, high), st.integers(low, high)).map(lambda t: f"{min(t)}-{max(t)}")
    step = st.tuples(st.sampled_from(["*", f"{low}-{high}"]), st.integers(1, high - low + 1)).map(
        lambda t: f"{t[0]}/{t[1]}"
    )
    listing = st.lists(st.integers(low, high), min_size=1, max_size=3, unique=True).map(
        lambda xs: ",".join(map(str, sorted(xs)))
    )
    return st.one_of(st.just("*"), value, rng, step, listing)


cron_expressions = st.tuples(field(0, 59), field(0, 23), field(1, 31), field(1, 12), field(0, 6)).map(" ".join)
anything = st.one_of(
    cron_expressions,
    st.sampled_from(
        [
            "@hourly",
            "@daily",
            "@weekly",
            "@monthly",
            "@yearly",
            "@reboot",
            "0 0 31 2 *",
            "* * * * * *",
            "61 * * * *",
            "",
            "   ",
            "0 0 29 2 *",
            "0 0 30 2,4 *",
        ]
    ),
    st.text(max_size=40),
)
zones = st.one_of(st.sampled_from(ZONES), st.text(max_size=30))
HYPOTHESIS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@HYPOTHESIS
@given(expression=anything, zone=zones)
def test_creating_a_job_never_fails_with_a_server_error(api, expression, zone):
    response = api.post(
        "/api/v1/jobs",
        {
            "name": "p",
            "schedule": {"type": "cron", "expression": expression, "timezone": zone},
            "target": {"url": "https://example.com/x"},
        },
        format="json",
    )
    assert response.status_code in (201, 400), response.content[:300]
    if response.status_code == 201:
        next_fire = response.json()["next_fire_at"]
        assert next_fire is not None, "an accepted schedule must fire at some point"
        assert datetime.fromisoformat(next_fire) > datetime.now(UTC)
    else:
        fields = response.json()["error"]["fields"]
        assert set(fields) <= {"schedule.expression", "schedule.timezone"} and all(fields.values())


@HYPOTHESIS
@given(expression=cron_expressions, zone=st.sampled_from(ZONES), count=st.integers(1, 20))
def test_a_preview_of_an_accepted_expression_is_ascending_and_in_the_future(api, expression, zone, count):
    response = api.post(
        "/api/v1/schedules/preview",
        {"expression": expression, "timezone": zone, "count": count, "start": "2026-03-01T00:00:00Z"},
        format="json",
    )
    assert response.status_code in (200, 400), response.content[:300]
    if response.status_code == 400:
        assert response.json()["error"]["fields"]["expression"]  # e.g. "never fires: February has no 30th"
        return
    times = [datetime.fromisoformat(t["utc"]) for t in response.json()["fire_times"]]
    assert 1 <= len(times) <= count
    assert times == sorted(set(times))
    assert times[0] > datetime(2026, 3, 1, tzinfo=UTC)
