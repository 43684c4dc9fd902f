"""What an attempt stores of the request headers it sent, and how they are shown again.

Every delivery carries six headers whose values follow from its run and its attempt number alone:
`Idempotency-Key`, `Chime-Run-Id` and `webhook-id` (the run's id), `Chime-Job-Id`,
`Chime-Attempt` and `Chime-Scheduled-For`. A job cannot set them (RESERVED_HEADERS). Stored with
every attempt they were ~300 of its ~630 bytes: three copies of the run's id and one of the job's
in each row, its WAL record and its share of a day's retention (issue #12, bench/row_designs.py).

So an attempt stores the headers it sent less these six, and only where the value is exactly the
derived one (`stored_headers`): nothing is lost. `sent_headers` puts them back for everything that
shows an attempt (the API, the dashboard, the archives). A stored mapping that is empty (a
stripped attempt, or one the lease sweep wrote for a lost worker) records no request and gets
nothing back. Attempts stored before this rule kept all their headers; putting back a header that
is already there changes nothing.

All six are sent from `derivable_headers` (apps/delivery/preparing.py); the signer sets
`webhook-id` again, to the same value (the message id build_request gives it, the run's id).
tests/delivery/test_deliver_runs.py checks every header shown against what a real receiver got,
so a change to what is sent that this module does not follow fails there (a header shown but no
longer sent, or sent with another value).

Shown headers come in the stored mapping's order (jsonb's, not the wire's: it never was), the
six put back after them.
"""

from datetime import datetime

from apps.core.ids import uuid_text


def utc_text(moment: datetime) -> str:
    """A UTC time as Chime writes it into requests: ISO 8601 with a `Z`."""
    return moment.isoformat().replace("+00:00", "Z")


def derived_headers(*, run_id: str, job_id: str, attempt: int, scheduled_for: str) -> dict[str, str]:
    """Chime's own headers of one delivery, in the order they are sent (the Standard Webhooks
    ones, `webhook-id` among them, come from apps/delivery/signing.py)."""
    return {
        "Idempotency-Key": run_id,
        "Chime-Run-Id": run_id,
        "Chime-Job-Id": job_id,
        "Chime-Attempt": str(attempt),
        "Chime-Scheduled-For": scheduled_for,
    }


def derivable_headers(*, run_id: str, job_id: str, attempt: int, scheduled_for: str) -> dict[str, str]:
    """Every header `sent_headers` puts back, from the texts build_request sends: the derived
    ones and `webhook-id`. The worker keeps it with the request (WebhookRequest.derivable), so
    recording the attempt does not turn the ids and the time into text a second time."""
    return {
        **derived_headers(run_id=run_id, job_id=job_id, attempt=attempt, scheduled_for=scheduled_for),
        "webhook-id": run_id,
    }


def _derivable(run_id, job_id, attempt: int, scheduled_for: datetime) -> dict[str, str]:
    return derivable_headers(
        run_id=uuid_text(run_id), job_id=uuid_text(job_id), attempt=attempt, scheduled_for=utc_text(scheduled_for)
    )


def without_derivable(sent: dict[str, str], derivable: dict[str, str]) -> dict[str, str]:
    """`sent` less the headers whose value is exactly the derivable one."""
    return {name: value for name, value in sent.items() if derivable.get(name) != value}


def stored_headers(sent: dict[str, str], *, run_id, job_id, attempt: int, scheduled_for: datetime) -> dict[str, str]:
    """`sent` less the headers `sent_headers` can put back exactly."""
    return without_derivable(sent, _derivable(run_id, job_id, attempt, scheduled_for))


def sent_headers(stored: dict | None, *, run_id, job_id, attempt: int, scheduled_for: datetime) -> dict[str, str]:
    """The headers an attempt sent: what it stored, plus the derived ones it left out."""
    if not stored:
        return {}
    derivable = _derivable(run_id, job_id, attempt, scheduled_for)
    return {**stored, **{name: value for name, value in derivable.items() if name not in stored}}


def attempt_sent_headers(attempt) -> dict[str, str]:
    """`sent_headers` of a RunAttempt; reads `attempt.run` (loaded with the run's own
    `run.attempts`, no query then)."""
    run = attempt.run
    return sent_headers(
        attempt.request_headers,
        run_id=run.id,
        job_id=run.definition_id,
        attempt=attempt.number,
        scheduled_for=run.scheduled_for,
    )
