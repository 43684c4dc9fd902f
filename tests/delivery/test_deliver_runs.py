"""The delivery service in-process (no Celery): outcomes, job-level reactions, the request sent.
Real PostgreSQL, a real HTTP receiver on 127.0.0.1, the real transport."""

from datetime import UTC, datetime

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.utils import timezone

from apps.delivery.services import deliver_runs
from apps.jobs.models import JobRun, JobStatus, RunAttempt, RunStatus, ScheduleType
from apps.tenants.models import Membership, Role
from tests.factories import JobFactory
from tests.support.receiver import Reply

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def job(tenant, receiver):
    return JobFactory(tenant=tenant, target_url=f"{receiver.url}/hook", failure_threshold=3, retry_max_attempts=1)


def queued_run(job, **fields) -> JobRun:
    now = timezone.now()
    return JobRun.objects.create(
        tenant=job.tenant,
        definition=job,
        partition=job.partition,
        scheduled_for=fields.pop("scheduled_for", now),
        available_at=now,
        **{"status": RunStatus.QUEUED, **fields},
    )


def test_it_sends_a_signed_standard_webhook_with_chime_headers(job, receiver):
    run = queued_run(job, scheduled_for=datetime(2026, 11, 29, 2, 0, tzinfo=UTC))
    report = deliver_runs([str(run.id)])
    assert report.as_dict() == {"claimed": 1, "outcomes": {"succeeded": 1}}
    (delivery,) = receiver.received()
    assert delivery.signature_ok
    assert delivery.headers["webhook-id"] == delivery.headers["idempotency-key"] == str(run.id)
    assert delivery.headers["chime-scheduled-for"] == "2026-11-29T02:00:00Z"
    assert delivery.headers["chime-attempt"] == "1"
    assert delivery.headers["content-type"] == "application/json"
    body = delivery.json()
    assert body["type"] == "chime.run"
    assert body["data"]["run_id"] == str(run.id)
    run.refresh_from_db()
    assert (run.status, run.attempt_count, run.lease_owner) == (RunStatus.SUCCEEDED, 1, "")
    attempt = run.attempts.get()
    assert attempt.response_excerpt == "ok"
    assert "webhook-signature" not in attempt.request_headers


def test_the_attempt_stores_what_is_not_derived_and_shows_exactly_what_was_sent(job, receiver, api):
    """apps/jobs/attempt_headers.py: the six headers derived from the run and the attempt's number
    are not stored, and every surface that shows an attempt (the model, the API, the archives)
    shows them as the receiver got them."""
    from apps.history.archive import RUN_FIELDS, run_records

    job.target_headers = {"X-Team": "billing"}
    job.save()
    run = queued_run(job, scheduled_for=datetime(2026, 11, 29, 2, 0, 0, 123456, tzinfo=UTC))
    deliver_runs([str(run.id)])
    (delivery,) = receiver.received()
    attempt = RunAttempt.objects.get(run=run)
    derived = {"idempotency-key", "chime-run-id", "chime-job-id", "chime-attempt", "chime-scheduled-for", "webhook-id"}
    assert not derived & {name.lower() for name in attempt.request_headers}  # not stored ...
    shown = {name.lower(): value for name, value in attempt.sent_headers.items()}
    assert derived < set(shown)  # ... but shown, as the receiver got them, with everything else Chime sent
    assert shown == {name: delivery.headers[name] for name in shown}
    chime_sent = {n for n in delivery.headers if n.startswith(("chime-", "webhook-")) or n in derived}
    assert chime_sent - {"webhook-signature"} <= set(shown)
    assert shown["chime-scheduled-for"] == "2026-11-29T02:00:00.123456Z"
    assert shown["x-team"] == "billing"
    (api_attempt,) = api.get(f"/api/v1/runs/{run.id}").json()["attempts"]
    assert {name.lower(): value for name, value in api_attempt["request_headers"].items()} == shown
    (record,) = run_records(list(JobRun.objects.filter(id=run.id).values(*RUN_FIELDS)))
    assert {name.lower(): value for name, value in record["attempts"][0]["request_headers"].items()} == shown


def test_a_run_not_queued_is_not_sent(job, receiver):
    runs = [queued_run(job, status=status) for status in (RunStatus.CANCELLED, RunStatus.SUCCEEDED, RunStatus.RUNNING)]
    assert deliver_runs([str(r.id) for r in runs]).claimed == 0
    assert receiver.received() == []


def test_a_paused_job_is_not_sent_but_a_manual_trigger_is(job, receiver):
    job.status = JobStatus.PAUSED
    job.save()
    scheduled, manual = queued_run(job), queued_run(job, trigger="manual")
    deliver_runs([str(scheduled.id), str(manual.id)])
    scheduled.refresh_from_db()
    assert (scheduled.status, scheduled.status_reason) == (RunStatus.CANCELLED, "Job was paused before delivery.")
    assert [d.webhook_id for d in receiver.received()] == [str(manual.id)]


def test_410_gone_fails_the_run_and_pauses_the_job(job, receiver, mailoutbox, tenant):
    owner = get_user_model().objects.create_user("owner", email="owner@example.com")
    Membership.objects.create(user=owner, tenant=tenant, role=Role.OWNER)
    receiver.respond = lambda d: Reply(status=410)
    run = queued_run(job)
    deliver_runs([str(run.id)])
    run.refresh_from_db()
    job.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert job.status == JobStatus.PAUSED
    assert "410 Gone" in job.status_reason
    assert [m.to for m in mailoutbox] == [["owner@example.com"]]


def test_the_circuit_breaker_pauses_a_job_after_consecutive_failures(job, receiver, mailoutbox, tenant):
    owner = get_user_model().objects.create_user("owner", email="owner@example.com")
    Membership.objects.create(user=owner, tenant=tenant, role=Role.OWNER)
    viewer = get_user_model().objects.create_user("viewer", email="viewer@example.com")
    Membership.objects.create(user=viewer, tenant=tenant, role=Role.VIEWER)
    receiver.respond = lambda d: Reply(status=500)
    for n in range(1, 4):
        deliver_runs([str(queued_run(job).id)])
        job.refresh_from_db()
        assert job.consecutive_failures == n
    assert job.status == JobStatus.PAUSED
    assert job.status_reason == "Paused by the circuit breaker: 3 runs in a row failed."
    assert len(mailoutbox) == 1 and mailoutbox[0].to == ["owner@example.com"]
    assert job.name in mailoutbox[0].subject


def test_a_success_resets_the_failure_count(job, receiver):
    receiver.respond = lambda d: Reply(status=500)
    deliver_runs([str(queued_run(job).id)])
    deliver_runs([str(queued_run(job).id)])
    receiver.respond = lambda d: Reply(status=200)
    deliver_runs([str(queued_run(job).id)])
    job.refresh_from_db()
    assert (job.consecutive_failures, job.status) == (0, JobStatus.ACTIVE)


def test_resume_clears_the_circuit_breaker(job, api):
    job.status, job.consecutive_failures = JobStatus.PAUSED, 3
    job.save()
    body = api.post(f"/api/v1/jobs/{job.id}/resume").json()
    assert (body["status"], body["consecutive_failures"]) == ("active", 0)


def test_a_run_cancelled_while_in_flight_keeps_its_cancellation(job, receiver):
    run = queued_run(job)

    def cancel_then_answer(delivery):
        JobRun.objects.filter(id=run.id).update(status=RunStatus.CANCELLED, status_reason="Cancelled by the API.")
        connection.close()  # the receiver's thread opened its own connection
        return Reply(status=200)

    receiver.respond = cancel_then_answer
    report = deliver_runs([str(run.id)])
    assert report.outcomes == {"lost_lease": 1}
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    assert run.attempts.get().status_code == 200, "the attempt is still on record"


def test_once_jobs_deliver_their_own_body_exactly(tenant, receiver):
    job = JobFactory(
        tenant=tenant,
        schedule_type=ScheduleType.ONCE,
        cron_expression="",
        target_url=f"{receiver.url}/x",
        target_body={"ü": [1, 2.5, None]},
        target_headers={"X-Team": "a"},
    )
    deliver_runs([str(queued_run(job).id)])
    (delivery,) = receiver.received()
    assert delivery.body == '{"ü":[1,2.5,null]}'.encode()
    assert delivery.headers["x-team"] == "a"
    assert delivery.signature_ok


def test_after_a_rotation_deliveries_carry_both_signatures(job, receiver, tenant):
    from standardwebhooks import Webhook

    from apps.tenants.selectors import signing_secret_current
    from apps.tenants.services import signing_secret_rotate

    old = signing_secret_current(tenant=tenant).secret
    new = signing_secret_rotate(tenant=tenant).secret
    deliver_runs([str(queued_run(job).id)])
    (delivery,) = receiver.received()
    assert len(delivery.headers["webhook-signature"].split(" ")) == 2
    for secret in (old, new):  # a receiver on either secret accepts it
        Webhook(secret).verify(delivery.body, delivery.headers)


def test_an_expired_old_secret_no_longer_signs(job, receiver, tenant):
    from apps.tenants.models import SigningSecret
    from apps.tenants.services import signing_secret_rotate

    signing_secret_rotate(tenant=tenant)
    SigningSecret.objects.filter(tenant=tenant, expires_at__isnull=False).update(expires_at=timezone.now())
    deliver_runs([str(queued_run(job).id)])
    (delivery,) = receiver.received()
    assert len(delivery.headers["webhook-signature"].split(" ")) == 1
