"""The dashboard's job form and the API's serializer accept and refuse the same inputs."""

import json

import pytest

from apps.api.serializers.jobs import JobInputSerializer
from apps.dashboard.forms.jobs import JobForm

pytestmark = pytest.mark.django_db

FORM = {
    "name": "n",
    "schedule_type": "cron",
    "cron_expression": "0 9 * * mon-fri",
    "timezone": "America/New_York",
    "target_url": "https://example.com/hook",
    "target_method": "POST",
    "target_headers": "X-A: 1",
    "target_body": '{"a": [1, 2]}',
    "priority": "low",
    "timeout_seconds": "30",
    "retry_max_attempts": "5",
    "retry_initial_backoff_seconds": "10",
    "retry_max_backoff_seconds": "3600",
    "dst_gap": "shift",
    "dst_overlap": "first",
    "misfire_policy": "skip",
    "catch_up_limit": "100",
    "jitter_seconds": "0",
    "concurrency_policy": "replace",
    "failure_threshold": "10",
    "enabled": "on",
}


def api_payload(form: dict) -> dict:
    schedule = {"type": form["schedule_type"], "timezone": form["timezone"]}
    if form["schedule_type"] == "cron":
        schedule["expression"] = form["cron_expression"]
    headers = dict(line.split(": ", 1) for line in form["target_headers"].splitlines() if line)
    return {
        "name": form["name"],
        "schedule": schedule,
        "target": {"url": form["target_url"], "method": form["target_method"], "headers": headers,
                   "body": json.loads(form["target_body"]) if form["target_body"] else None},
        "priority": form["priority"],
        "timeout_seconds": int(form["timeout_seconds"]),
        "retry": {"max_attempts": int(form["retry_max_attempts"]),
                  "initial_backoff_seconds": int(form["retry_initial_backoff_seconds"]),
                  "max_backoff_seconds": int(form["retry_max_backoff_seconds"])},
        "enabled": form.get("enabled") == "on",
        "dst_policy": {"gap": form["dst_gap"], "overlap": form["dst_overlap"]},
        "misfire_policy": form["misfire_policy"],
        "catch_up_limit": int(form["catch_up_limit"]),
        "jitter_seconds": int(form["jitter_seconds"]),
        "concurrency_policy": form["concurrency_policy"],
        "failure_threshold": int(form["failure_threshold"]),
    }  # fmt: skip


def test_a_valid_job_gives_the_same_model_fields():
    form = JobForm(FORM)
    assert form.is_valid(), form.errors
    serializer = JobInputSerializer(data=api_payload(FORM))
    assert serializer.is_valid(), serializer.errors
    assert form.job_fields() == serializer.to_model_fields()


@pytest.mark.parametrize(
    "changes",
    [
        {"cron_expression": "0 0 30 2 *"},
        {"cron_expression": "* * * * * *"},
        {"cron_expression": "@reboot"},
        {"timezone": "Europe/Nowhere"},
        {"target_url": "http://169.254.169.254/latest/meta-data"},
        {"target_url": "not a url"},
        {"target_headers": "Content-Length: 5"},
        {"target_headers": "Bad Name: 1"},
        {"timeout_seconds": "0"},
        {"timeout_seconds": "901"},
        {"retry_max_attempts": "51"},
        {"retry_initial_backoff_seconds": "20", "retry_max_backoff_seconds": "10"},
        {"catch_up_limit": "0"},
        {"jitter_seconds": "3601"},
        {"failure_threshold": "1001"},
        {"name": ""},
        {"target_method": "GET"},  # with FORM's body: a GET is sent without one
        {"target_body": '{"a":' * 33 + "1" + "}" * 33},  # deeper than MAX_BODY_DEPTH
    ],
)
def test_both_refuse_the_same_invalid_input(changes, settings):
    settings.WEBHOOK_ALLOW_PRIVATE_NETWORKS = False
    data = {**FORM, **changes}
    assert not JobForm(data).is_valid()
    assert not JobInputSerializer(data=api_payload(data)).is_valid()


def test_the_form_refuses_a_body_too_deep_to_parse_and_a_once_job_beyond_the_lookback():
    """Same rules as the API (issue #11): a field error, never a 500 (RecursionError, InvalidSchedule)."""
    deep = JobForm({**FORM, "target_body": "[" * 5000 + "]" * 5000})
    assert not deep.is_valid() and "nested too deeply" in deep.errors["target_body"][0]
    past = JobForm({**FORM, "schedule_type": "once", "run_at": "2019-01-01T00:00", "timezone": "UTC"})
    assert not past.is_valid() and "in the past" in past.errors["run_at"][0]
    soon = JobForm({**FORM, "schedule_type": "once", "run_at": "2999-01-01T00:00", "timezone": "UTC"})
    assert soon.is_valid(), soon.errors
