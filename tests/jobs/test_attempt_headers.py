"""apps/jobs/attempt_headers.py: an attempt stores its request headers less the six derived from
its run and number, only where the value is exactly the derived one, and shows them again as
sent. The end-to-end check against a real receiver is in tests/delivery/test_deliver_runs.py."""

import uuid
from datetime import UTC, datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.jobs.attempt_headers import derived_headers, sent_headers, stored_headers, utc_text
from apps.jobs.models import JobRun, RunAttempt
from tests.factories import JobFactory

RUN, JOB = uuid.UUID("0190a5c4-1111-7000-8000-000000000001"), uuid.UUID("0190a5c4-2222-7000-8000-000000000002")
AT = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)
KEYS = {"run_id": RUN, "job_id": JOB, "attempt": 3, "scheduled_for": AT}
SENT = {
    "X-Team": "billing",
    "Content-Type": "application/json",
    **derived_headers(run_id=str(RUN), job_id=str(JOB), attempt=3, scheduled_for=utc_text(AT)),
    "webhook-id": str(RUN),
    "webhook-timestamp": "1796634000",
    "traceparent": f"00-{RUN.hex}-0123456789abcdef-01",
}


def test_the_derived_headers_are_left_out_and_put_back_exactly():
    stored = stored_headers(SENT, **KEYS)
    assert stored == {
        "X-Team": "billing",
        "Content-Type": "application/json",
        "webhook-timestamp": "1796634000",
        "traceparent": f"00-{RUN.hex}-0123456789abcdef-01",
    }
    assert sent_headers(stored, **KEYS) == SENT
    assert SENT["Chime-Scheduled-For"] == "2026-12-07T09:00:00Z" and SENT["Chime-Attempt"] == "3"


def test_a_value_that_is_not_the_derived_one_is_kept():
    sent = {**SENT, "Chime-Attempt": "2", "Idempotency-Key": "<redacted>"}
    stored = stored_headers(sent, **KEYS)
    assert stored["Chime-Attempt"] == "2" and stored["Idempotency-Key"] == "<redacted>"
    assert sent_headers(stored, **KEYS) == sent


def test_headers_stored_whole_before_the_rule_read_as_they_are():
    assert sent_headers(dict(SENT), **KEYS) == SENT


def test_an_attempt_that_stored_no_headers_shows_none():
    # A stripped attempt, or one the lease sweep wrote for a lost worker: no request is known.
    assert sent_headers({}, **KEYS) == {}
    assert sent_headers(None, **KEYS) == {}


@pytest.mark.django_db
def test_showing_a_runs_attempts_reads_the_run_once(tenant):
    """`sent_headers` reads `attempt.run`: the run's own `attempts` hand it over, no query each."""
    job = JobFactory(tenant=tenant)
    run = JobRun.objects.create(
        tenant=tenant, definition=job, partition=job.partition, scheduled_for=AT, available_at=AT, attempt_count=3
    )
    for number in (1, 2, 3):
        RunAttempt.objects.create(run=run, number=number, started_at=AT, request_headers={"webhook-timestamp": "1"})
    run = JobRun.objects.get(id=run.id)
    with CaptureQueriesContext(connection) as queries:
        shown = [attempt.sent_headers for attempt in run.attempts.all()]
    assert len(queries) == 1
    assert [headers["Chime-Attempt"] for headers in shown] == ["1", "2", "3"]
    assert {headers["Chime-Run-Id"] for headers in shown} == {str(run.id)}


def test_no_derivable_header_is_ever_secret():
    """What lets an attempt drop the derivable headers before it redacts the rest
    (apps/delivery/outcomes.attempt_row): redaction never touches one of them, even one a job
    names as secret, so the order of the two cannot change what is stored."""
    from apps.jobs.attempt_headers import derivable_headers
    from apps.jobs.secrets import is_secret_header

    names = derivable_headers(run_id=str(RUN), job_id=str(JOB), attempt=3, scheduled_for=utc_text(AT))
    assert len(names) == 6
    for name in names:
        assert not is_secret_header(name, marked=[name]), name
