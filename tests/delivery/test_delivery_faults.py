"""The worker's side of a database outage and of a shutdown, in-process: real PostgreSQL (whose
server really ends the worker's session), a real receiver on 127.0.0.1, the real transport."""

import threading

import psycopg
import pytest
from django.db import connection
from django.utils import timezone

from apps.delivery import draining
from apps.delivery.claiming import claim_runs
from apps.delivery.services import HandBack, deliver_runs
from apps.jobs.models import ErrorKind, JobRun, RunStatus
from tests.factories import JobFactory
from tests.support.receiver import Reply

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def job(tenant, receiver):
    return JobFactory(tenant=tenant, target_url=f"{receiver.url}/hook", retry_max_attempts=3)


@pytest.fixture(autouse=True)
def not_draining():
    draining.reset()
    yield
    draining.reset()


def queued_run(job) -> JobRun:
    now = timezone.now()
    return JobRun.objects.create(
        tenant=job.tenant,
        definition=job,
        partition=job.partition,
        scheduled_for=now,
        available_at=now,
        status=RunStatus.QUEUED,
        queued_at=now,
    )


def terminate(backend_pid: int) -> None:
    """End a session from the server side, as a PostgreSQL restart does."""
    db = connection.settings_dict
    with psycopg.connect(
        dbname=db["NAME"], host=db["HOST"] or "127.0.0.1", port=db["PORT"] or 5432, user=db["USER"], autocommit=True
    ) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [backend_pid])


def this_threads_backend() -> int:
    connection.ensure_connection()
    return connection.connection.info.backend_pid


def test_a_claim_whose_connection_the_server_ended_is_retried_not_dropped(job, receiver):
    run = queued_run(job)
    terminate(this_threads_backend())
    report = deliver_runs([str(run.id)])
    assert report.as_dict() == {"claimed": 1, "outcomes": {"succeeded": 1}}
    run.refresh_from_db()
    assert (run.status, run.attempt_count) == (RunStatus.SUCCEEDED, 1)
    assert len(receiver.received()) == 1


def test_an_outcome_is_recorded_when_the_database_answers_again_not_sent_twice(job, receiver):
    """The endpoint answered 200, then the worker's session ended before it recorded that."""
    run = queued_run(job)
    worker_backend = this_threads_backend()

    def answer_then_cut_the_database(delivery):
        terminate(worker_backend)
        return Reply(status=200)

    receiver.respond = answer_then_cut_the_database
    report = deliver_runs([str(run.id)])
    assert report.as_dict() == {"claimed": 1, "outcomes": {"succeeded": 1}}
    run.refresh_from_db()
    assert (run.status, run.attempt_count) == (RunStatus.SUCCEEDED, 1)
    assert list(run.attempts.values_list("number", "status_code")) == [(1, 200)]
    assert len(receiver.received()) == 1, "delivered once: the outcome was kept, not the request repeated"


def test_a_claim_repeated_after_an_ambiguous_commit_keeps_its_runs(job):
    """A COMMIT that failed on the wire may have happened: the retry (same owner) gets the runs
    it already took instead of leaving them to a lease expiry."""
    run = queued_run(job)
    first = claim_runs([str(run.id)], owner="w:1:abc", now=timezone.now())
    again = claim_runs([str(run.id)], owner="w:1:abc", now=timezone.now())
    other = claim_runs([str(run.id)], owner="w:2:def", now=timezone.now())
    assert [r.id for r in first] == [r.id for r in again] == [run.id]
    assert other == []
    run.refresh_from_db()
    assert (run.status, run.attempt_count) == (RunStatus.RUNNING, 1), "claimed once, charged once"


def test_a_draining_worker_hands_its_message_back_without_claiming(job, receiver):
    run = queued_run(job)
    draining.start_draining()
    with pytest.raises(HandBack):
        deliver_runs([str(run.id)])
    run.refresh_from_db()
    assert (run.status, run.attempt_count, run.lease_owner) == (RunStatus.QUEUED, 0, "")
    assert receiver.received() == []


def test_requests_still_out_when_the_shutdown_grace_ends_are_handed_back_at_once(job, receiver, settings):
    settings.CHIME_WORKER_SHUTDOWN_GRACE_SECONDS = 0.5
    quick, slow = queued_run(job), queued_run(job)
    receiver.respond = lambda d: Reply(delay_seconds=20 if d.webhook_id == str(slow.id) else 0)
    threading.Timer(1.0, draining.start_draining).start()  # SIGTERM arrives while `slow` is out
    started = timezone.now()
    report = deliver_runs([str(quick.id), str(slow.id)])
    assert (timezone.now() - started).total_seconds() < 10, "did not wait for the slow endpoint"
    assert report.outcomes[RunStatus.SUCCEEDED] == 1 and report.outcomes[RunStatus.RETRYING] == 1
    quick.refresh_from_db()
    slow.refresh_from_db()
    assert quick.status == RunStatus.SUCCEEDED
    assert (slow.status, slow.lease_owner) == (RunStatus.RETRYING, "")
    assert slow.available_at <= timezone.now(), "deliverable again at once, not after a backoff or a lease"
    attempt = slow.attempts.get()
    assert attempt.error_kind == ErrorKind.WORKER_LOST and "shut down" in attempt.error
