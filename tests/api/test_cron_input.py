"""Cron input at the API (issue #11): what once was a 500 or a silent rewrite is a fire-time
list or a 400 naming the field."""

from datetime import UTC, datetime

import pytest

from tests.api.test_jobs import CRON_JOB, with_changes

pytestmark = pytest.mark.django_db
START = "2026-03-01T00:00:00Z"


def preview(api, expression: str, count: int = 3):
    return api.post(
        "/api/v1/schedules/preview",
        {"expression": expression, "timezone": "UTC", "start": START, "count": count},
        format="json",
    )


def fire_days(response) -> list[str]:
    return [datetime.fromisoformat(f["utc"]).astimezone(UTC).strftime("%a %d") for f in response.json()["fire_times"]]


@pytest.mark.parametrize("expression", ["*,5 * * * *", "0 *,5 * * *", "0 0 *,5 * *"])
def test_a_list_containing_a_star_is_the_whole_field(api, expression):
    response = preview(api, expression)  # a 500 with croniter
    assert response.status_code == 200, response.content
    created = api.post("/api/v1/jobs", with_changes(CRON_JOB, schedule__expression=expression), format="json")
    assert created.status_code == 201, created.content
    assert created.json()["schedule"]["expression"] == expression


def test_a_star_list_in_the_day_of_month_fires_every_day(api):
    assert fire_days(preview(api, "0 0 *,5 * *")) == ["Mon 02", "Tue 03", "Wed 04"]  # was: the 5th only


def test_day_of_week_zero_to_seven_is_every_day(api):
    assert fire_days(preview(api, "0 0 * * 0-7")) == ["Mon 02", "Tue 03", "Wed 04"]  # was: Sundays
    assert fire_days(preview(api, "0 0 * * 0-7/2", 4)) == ["Tue 03", "Thu 05", "Sat 07", "Sun 08"]


def test_nth_weekday_with_a_restricted_day_of_month_follows_the_or_rule(api):
    # March 2026: the 4th Monday is the 23rd; the 1st of April is a Wednesday.
    assert fire_days(preview(api, "0 0 1 * MON#4")) == ["Mon 23", "Wed 01", "Mon 27"]  # was: refused
    assert fire_days(preview(api, "0 0 1-7 * MON#1")) == ["Mon 02", "Tue 03", "Wed 04"]  # was: Mondays only


@pytest.mark.parametrize("expression", ["5-5/0 * * * *", "0 0 1-7/0 * *"])
def test_a_zero_step_inside_a_range_is_a_400(api, expression):
    response = preview(api, expression)  # was: accepted and rewritten to '5'
    assert response.status_code == 400
    assert "a step must be at least 1" in str(response.json())


def test_a_seconds_field_is_refused_with_the_equivalent(api):
    response = preview(api, "0 30 2 * * *")
    assert response.status_code == 400
    assert "Without the seconds field, this is '30 2 * * *'" in str(response.json())
