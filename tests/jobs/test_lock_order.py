"""One lock order, job row before its runs (docs/architecture.md#lock-order), raced on real
PostgreSQL: a worker claiming (and recording) the runs of a `forbid` job while the API cancels one
of them, pauses, updates and deletes the job, from threads with their own sessions, 200 times.
Claiming used to lock the runs and then the job while delete and update lock the job and then
its runs: "deadlock detected"."""

import threading
from datetime import UTC, datetime

import pytest
from django.db import OperationalError, connection
from django.utils import timezone

from apps.delivery.claiming import claim_runs
from apps.delivery.recording import record_in_lock_order
from apps.delivery.webhook_types import WebhookRequest, WebhookResponse
from apps.jobs.models import JobDefinition
from apps.jobs.services import JobActionError, job_delete, job_pause, job_update, run_cancel
from tests.factories import JobFactory, queued_runs

pytestmark = pytest.mark.django_db(transaction=True)

ROUNDS = 200
RUNS_PER_ROUND = 4


def a_request(run) -> WebhookRequest:
    return WebhookRequest(str(run.id), "http://127.0.0.1:9/hook", "POST", {}, b"", 5)


def a_response(run, status: int = 500) -> WebhookResponse:
    now = datetime.now(UTC)
    return WebhookResponse(str(run.id), now, now, 1, status, "", None, None, None)


def race(*actions) -> list[BaseException]:
    """Run every action at once, each in its own thread and session; the errors they raised."""
    barrier = threading.Barrier(len(actions))
    errors: list[BaseException] = []

    def run(action):
        try:
            barrier.wait()
            action()
        except JobActionError:
            pass  # e.g. updating a job the other thread deleted: a refusal, not a lock problem
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(action,)) for action in actions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return errors


def test_claim_record_cancel_pause_update_and_delete_never_deadlock(tenant):
    """Even rounds: a `forbid` job, its runs failing (the recording writes the job). Odd rounds: an
    `allow` job claimed by the one statement, its runs succeeding, its failure counter 0 or not
    (the recording locks the job only when it resets the counter)."""
    deadlocks = []
    for round_number in range(ROUNDS):
        guarded = round_number % 2 == 0
        job = JobFactory(
            tenant=tenant,
            concurrency_policy="forbid" if guarded else "allow",
            cron_expression="*/5 * * * *",
            consecutive_failures=round_number % 4 // 2,
        )
        runs = queued_runs(job, RUNS_PER_ROUND)
        ids = [str(r.id) for r in runs]

        def claim_and_record(owner, ids=ids, guarded=guarded):
            claimed = claim_runs(ids, owner=owner, now=timezone.now(), guarded_jobs=None if guarded else [])
            status = 500 if guarded else 200
            if claimed:
                record_in_lock_order([(r, a_request(r), a_response(r, status)) for r in claimed], owner=owner)

        def fresh(job=job):
            return JobDefinition.objects.get(pk=job.pk)

        n = round_number
        actions = [
            lambda n=n: claim_and_record(f"w:1:{n}"),
            lambda n=n: claim_and_record(f"w:2:{n}"),
            lambda run=runs[n % RUNS_PER_ROUND]: run_cancel(run=run),
            lambda: job_pause(job=fresh()),
            lambda: job_update(job=fresh(), cron_expression="*/7 * * * *"),
            lambda: job_delete(job=fresh()),
        ]
        errors = race(*actions)
        deadlocks += [e for e in errors if isinstance(e, OperationalError) and "deadlock" in str(e)]
        others = [e for e in errors if e not in deadlocks]
        assert not others, others
    assert not deadlocks, f"{len(deadlocks)} deadlocks in {ROUNDS} rounds: {deadlocks[0]}"
