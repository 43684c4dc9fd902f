"""Recording is per run (issue #10, deliverable 2): whatever an endpoint answers is stored
sanitized and cut, and one run's failure to record never touches another run's record.

record_outcomes is called as the worker calls it, on real PostgreSQL (the COPY path), with the
requests and responses the transport would hand it."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import OperationalError, connection
from django.utils import timezone

from apps.delivery.outcomes import record_outcomes
from apps.delivery.recording import lock_jobs, record_in_lock_order
from apps.delivery.sanitize import (
    MAX_INTEGER,
    REPLACEMENT,
    TRUNCATED_MARK,
    clean_headers,
    clean_integer,
    clean_text,
)
from apps.delivery.transport import WebhookRequest, WebhookResponse
from apps.jobs.models import JobDefinition, JobRun, RunStatus
from tests.factories import JobFactory
from tests.support.locks import row_held_elsewhere

OWNER = "worker-test:abc123"


# -- the sanitizer


def test_clean_text_replaces_nul_and_lone_surrogates():
    assert clean_text("ok\x00", 100) == f"ok{REPLACEMENT}"
    assert clean_text("a\ud800b\udfffc", 100) == f"a{REPLACEMENT}b{REPLACEMENT}c"


def test_clean_text_decodes_bytes_with_invalid_utf8_as_replacement_characters():
    assert clean_text(b"\xff\xfeok\xc3\x28\x00", 100) == f"{REPLACEMENT}{REPLACEMENT}ok{REPLACEMENT}({REPLACEMENT}"


def test_clean_text_cuts_to_the_limit_and_says_so():
    text = clean_text("x" * 3_000_000, 4096)
    assert len(text) == 4096 and text.endswith(TRUNCATED_MARK)
    assert clean_text("short", 4096) == "short"
    assert clean_text("abcdef", 3) == TRUNCATED_MARK[:3]  # a limit smaller than the mark still holds


def test_clean_text_of_none_and_non_strings():
    assert clean_text(None, 10) == ""
    assert clean_text(503, 10) == "503"


def test_clean_headers_cleans_names_and_values_and_bounds_their_number():
    cleaned = clean_headers({"X-\x00Odd": "a\x00b", "X-Huge": "h" * 100_000, **{f"h{n}": "v" for n in range(200)}})
    assert cleaned[f"X-{REPLACEMENT}Odd"] == f"a{REPLACEMENT}b"
    assert len(cleaned["X-Huge"]) == 4096
    assert len(cleaned) == 100


def test_clean_headers_keeps_clean_headers_as_they_are():
    headers = {"Content-Type": "application/json", "X-Edge": "e" * 4096, "N" * 256: "ok", "Ünïcode": "välue ✓"}
    assert clean_headers(headers) == headers


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"A": "ok", "B": "lone \ud800 surrogate"}, {"A": "ok", "B": f"lone {REPLACEMENT} surrogate"}),
        ({"A": "ok", "B\x00": "v"}, {"A": "ok", f"B{REPLACEMENT}": "v"}),
        ({"A": "ok", "B": b"\xffbytes"}, {"A": "ok", "B": f"{REPLACEMENT}bytes"}),
        ({"A": "ok", "B": 7}, {"A": "ok", "B": "7"}),
        ({"A": "ok", "B": "v" * 4097}, {"A": "ok", "B": "v" * (4096 - len(TRUNCATED_MARK)) + TRUNCATED_MARK}),
        ({"A": "ok", "N" * 257: "v"}, {"A": "ok", "N" * (256 - len(TRUNCATED_MARK)) + TRUNCATED_MARK: "v"}),
    ],
    ids=["surrogate", "nul-in-name", "bytes", "not-a-string", "value-too-long", "name-too-long"],
)
def test_clean_headers_cleans_one_bad_header_among_clean_ones(headers, expected):
    assert clean_headers(headers) == expected


def test_clean_integer_keeps_what_fits_an_integer_column():
    assert [clean_integer(v) for v in (200, 0, MAX_INTEGER)] == [200, 0, MAX_INTEGER]
    assert [clean_integer(v) for v in (-1, MAX_INTEGER + 1, None, "200", True)] == [None] * 5


# -- record_outcomes


@pytest.fixture
def job(tenant):
    return JobFactory(tenant=tenant, target_url="https://example.com/hook", retry_max_attempts=1)


def running_run(job) -> JobRun:
    now = timezone.now()
    return JobRun.objects.create(
        tenant=job.tenant,
        definition=job,
        partition=job.partition,
        scheduled_for=now - timedelta(microseconds=JobRun.objects.count() + 1),
        available_at=now,
        status=RunStatus.RUNNING,
        attempt_count=1,
        lease_owner=OWNER,
        lease_expires_at=now + timedelta(minutes=5),
    )


def delivery(run: JobRun, *, status: int | None = 200, excerpt: str = "ok", error: str | None = None, headers=None):
    started = datetime.now(UTC)
    request = WebhookRequest(
        key=str(run.id),
        url=run.definition.target_url,
        method="POST",
        headers=headers or {"Content-Type": "application/json"},
        body=b"{}",
        timeout_seconds=5,
    )
    response = WebhookResponse(
        key=str(run.id),
        started_at=started,
        finished_at=started,
        duration_ms=3,
        status_code=status,
        body_excerpt=excerpt,
        retry_after_seconds=None,
        error=error,
        error_kind="network" if error else None,
    )
    return run, request, response


def record(deliveries):
    return record_outcomes(deliveries, owner=OWNER, now=timezone.now())


def test_a_response_with_nul_is_recorded_beside_the_others_in_its_batch(job):
    runs = [running_run(job) for _ in range(3)]
    counts = record([delivery(runs[0]), delivery(runs[1], excerpt="ok\x00"), delivery(runs[2])])
    assert counts == {"succeeded": 3}
    for run in runs:
        run.refresh_from_db()
        assert (run.status, run.attempts.count()) == (RunStatus.SUCCEEDED, 1)
    assert runs[1].attempts.get().response_excerpt == f"ok{REPLACEMENT}"


def test_error_text_and_status_reason_from_a_response_are_sanitized(job):
    run = running_run(job)
    counts = record(
        [delivery(run, status=None, excerpt="", error="invalid HTTP response: 'HTTP/1.1 2\x00\udcff0' " * 50)]
    )
    assert counts == {"failed": 1}
    run.refresh_from_db()
    attempt = run.attempts.get()
    assert "\x00" not in attempt.error and len(attempt.error) == 1000
    assert "\x00" not in run.status_reason and len(run.status_reason) <= 500


def test_odd_request_headers_and_out_of_range_numbers_are_stored_sanitized(job):
    run = running_run(job)
    run, request, response = delivery(run, status=99_999_999_999, headers={"X-\x00": "v\x00"})
    response.duration_ms = -5
    record([(run, request, response)])
    attempt = run.attempts.get()
    assert attempt.request_headers == {f"X-{REPLACEMENT}": f"v{REPLACEMENT}"}
    assert (attempt.status_code, attempt.duration_ms) == (None, None)


@pytest.fixture
def poison_excerpts():
    """A value PostgreSQL refuses for a reason the sanitizer does not foresee: a CHECK constraint
    (rolled back with the test's transaction) that rejects excerpts containing 'poison'."""
    with connection.cursor() as cursor:
        cursor.execute(
            "ALTER TABLE jobs_runattempt ADD CONSTRAINT test_no_poison CHECK (response_excerpt NOT LIKE '%poison%')"
        )


def test_one_run_failing_to_record_does_not_touch_the_others_in_its_batch(job, poison_excerpts):
    good, bad, also_good = (running_run(job) for _ in range(3))
    counts = record([delivery(good), delivery(bad, excerpt="poison"), delivery(also_good, status=503)])
    assert counts == {"succeeded": 2, "failed": 1}
    good.refresh_from_db(), also_good.refresh_from_db()
    assert (good.status, good.attempts.get().response_excerpt) == (RunStatus.SUCCEEDED, "ok")
    assert (also_good.status, also_good.attempts.get().error) == (RunStatus.FAILED, "HTTP 503")


def test_the_run_that_cannot_be_recorded_still_ends_with_a_stripped_attempt(job, poison_excerpts):
    good, bad = running_run(job), running_run(job)
    record([delivery(good), delivery(bad, excerpt="poison")])
    bad.refresh_from_db()
    attempt = bad.attempts.get()
    assert (bad.status, bad.lease_owner) == (RunStatus.SUCCEEDED, ""), "the endpoint answered 200: not sent again"
    assert (attempt.status_code, attempt.response_excerpt, attempt.request_headers) == (200, "", {})
    assert "could not store" in attempt.error


def test_a_single_run_that_cannot_be_recorded_gets_a_stripped_attempt(job, poison_excerpts):
    run = running_run(job)
    assert record([delivery(run, status=500, excerpt="poison")]) == {"failed": 1}
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert run.attempts.get().response_excerpt == ""


# -- the job lock (apps/delivery/recording.py)


def held_as_a_delete_holds_it(job):
    """Another session holding the job row as a delete does (FOR UPDATE), until the block ends."""
    return row_held_elsewhere(JobDefinition, job.id, lock_timeout="500ms")


@pytest.mark.django_db(transaction=True)
def test_successes_of_a_job_with_no_failures_do_not_lock_it(job):
    """Nothing of the job row is written, so it is not locked (a lock is a write of the row): the
    recording goes through while a delete holds the job."""
    run = running_run(job)
    with held_as_a_delete_holds_it(job):
        assert record_in_lock_order([delivery(run)], owner=OWNER) == {"succeeded": 1}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("status, failures", [(500, 0), (200, 3)])
def test_a_recording_that_writes_the_job_waits_for_its_lock_first(job, status, failures):
    """A failure (its counter) or a success resetting a counter writes the job: it waits for the
    delete's lock before touching the runs (the lock order), here until lock_timeout."""
    JobDefinition.objects.filter(id=job.id).update(consecutive_failures=failures)
    run = running_run(job)
    with held_as_a_delete_holds_it(job), pytest.raises(OperationalError, match="lock timeout"):
        lock_jobs([delivery(run, status=status)])
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING


def test_an_attempt_row_has_the_copied_columns_in_order():
    """insert_attempts copies Attempt tuples positionally into ATTEMPT_COLUMNS, which must also
    be RunAttempt's columns."""
    from apps.delivery.outcomes import ATTEMPT_COLUMNS, Attempt
    from apps.jobs.models import RunAttempt

    assert Attempt._fields == ATTEMPT_COLUMNS
    assert set(ATTEMPT_COLUMNS) == {field.attname for field in RunAttempt._meta.concrete_fields}
