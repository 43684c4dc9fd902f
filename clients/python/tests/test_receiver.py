"""verify() and the dedupe stores, on deliveries signed by Chime's own signing code."""

import threading
from datetime import UTC, datetime, timedelta

import pytest
import redis
from django.conf import settings

from chime_client.dedupe import BUSY, CLAIMED, DONE, MemoryStore, RedisStore
from chime_client.receiver import (
    InvalidSignature,
    MalformedWebhook,
    Rejection,
    TimestampOutOfTolerance,
    WebhookReceiver,
    sign,
    verify,
)

from .signing import delivery, secret, tampered_signature


def test_it_accepts_a_delivery_signed_by_chime():
    key = secret()
    body, headers = delivery([key], msg_id="run-42", extra={"Chime-Job-Id": "job-7"})
    webhook = verify(body, headers, key)
    assert webhook.id == "run-42"
    assert webhook.json()["data"]["run_id"] == "run-42"
    assert (webhook.attempt, webhook.run_id, webhook.job_id) == (1, "run-42", "job-7")


def test_it_accepts_either_signature_during_a_rotation():
    old, new = secret(), secret()
    body, headers = delivery([new, old])  # Chime signs with both for 24 h
    assert len(headers["webhook-signature"].split()) == 2
    assert verify(body, headers, old).id == "run-1"  # a receiver not yet updated
    assert verify(body, headers, new).id == "run-1"  # one updated
    assert verify(body, headers, [secret(), new]).id == "run-1"  # several secrets accepted


def test_it_refuses_a_wrong_secret_a_changed_body_and_a_forged_signature():
    key = secret()
    body, headers = delivery([key])
    with pytest.raises(InvalidSignature):
        verify(body, headers, secret())
    with pytest.raises(InvalidSignature):
        verify(body + b" ", headers, key)
    with pytest.raises(InvalidSignature):
        verify(body, tampered_signature(headers), key)
    with pytest.raises(InvalidSignature):
        verify(body, {**headers, "webhook-id": "run-2"}, key)


def test_it_refuses_stale_and_future_timestamps_beyond_the_tolerance():
    key = secret()
    stale = delivery([key], at=datetime.now(UTC) - timedelta(minutes=6))
    future = delivery([key], at=datetime.now(UTC) + timedelta(minutes=6))
    recent = delivery([key], at=datetime.now(UTC) - timedelta(minutes=4))
    for body, headers in (stale, future):
        with pytest.raises(TimestampOutOfTolerance):
            verify(body, headers, key)
    assert verify(*recent, key).id == "run-1"
    assert verify(*stale, key, tolerance_seconds=600).id == "run-1"


def test_it_calls_a_request_without_the_headers_malformed():
    key = secret()
    body, headers = delivery([key])
    for name in ("webhook-id", "webhook-timestamp", "webhook-signature"):
        with pytest.raises(MalformedWebhook):
            verify(body, {k: v for k, v in headers.items() if k != name}, key)
    with pytest.raises(MalformedWebhook):
        verify(body, {**headers, "webhook-timestamp": "soon"}, key)


def test_its_own_signer_matches_chimes():
    key = secret()
    body, headers = delivery([key])
    assert (
        sign(key, "run-1", int(headers["webhook-timestamp"]), body)["webhook-signature"] == headers["webhook-signature"]
    )


@pytest.fixture(params=["memory", "redis"])
def store(request):
    if request.param == "memory":
        yield MemoryStore()
        return
    from tests.conftest import _require

    _require("Redis", settings.REDIS_URL, 6379)  # a skip, or a failure in CI
    client = redis.Redis.from_url(settings.REDIS_URL)
    prefix = f"test-dedupe-{datetime.now(UTC).timestamp()}:"
    yield RedisStore(client, prefix=prefix)
    for key in client.scan_iter(f"{prefix}*"):
        client.delete(key)


def test_a_store_claims_once_then_remembers_done(store):
    assert store.claim("a", 30) == CLAIMED
    assert store.claim("a", 30) == BUSY  # a concurrent duplicate while the handler runs
    store.complete("a", 60)
    assert store.claim("a", 30) == DONE
    store.release("a")  # releasing a done id changes nothing
    assert store.claim("a", 30) == DONE


def test_a_released_claim_can_be_claimed_again(store):
    assert store.claim("b", 30) == CLAIMED
    store.release("b")
    assert store.claim("b", 30) == CLAIMED


def test_an_expired_claim_can_be_taken_over():
    now = [0.0]
    store = MemoryStore(clock=lambda: now[0])
    assert store.claim("c", 5) == CLAIMED
    now[0] = 6
    assert store.claim("c", 5) == CLAIMED


def test_the_receiver_gate_runs_a_run_once():
    key = secret()
    receiver = WebhookReceiver(lambda: [key], store=MemoryStore())
    body, headers = delivery([key], msg_id="run-9")
    first = receiver.gate(body, headers)
    assert first.id == "run-9"
    assert receiver.gate(body, headers) == Rejection(503, "duplicate: being handled", {"Retry-After": "60"})
    receiver.finish(first, ok=False)  # the handler failed: Chime's retry runs it again
    again = receiver.gate(*delivery([key], msg_id="run-9"))
    receiver.finish(again, ok=True)
    assert receiver.gate(body, headers).status == 200
    assert receiver.gate(body, tampered_signature(headers)).status == 401


def test_concurrent_duplicates_claim_once(store):
    """Twenty deliveries of one run at the same moment: one handler runs, the others are told busy."""
    start = threading.Barrier(20)
    answers = []

    def deliver():
        start.wait()
        answers.append(store.claim("same-run", 30))

    threads = [threading.Thread(target=deliver) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(answers) == [BUSY] * 19 + [CLAIMED]
