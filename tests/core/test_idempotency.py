"""apps/core/idempotency.py on real PostgreSQL: a key is taken once, replayed while it lives,
taken over once it expired, and two requests racing with one key create one thing."""

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from apps.core.idempotency import KEY_LIFETIME, IdempotencyConflict, idempotent
from apps.core.models import IdempotencyRecord

pytestmark = pytest.mark.django_db


def counting_producer(calls: list, body: dict):
    def produce():
        calls.append(1)
        return 201, body

    return produce


def test_the_first_request_produces_and_the_same_body_replays(tenant):
    calls = []
    assert idempotent(tenant=tenant, key="k", payload={"a": 1}, produce=counting_producer(calls, {"n": 1})) == (
        201,
        {"n": 1},
        False,
    )
    assert idempotent(tenant=tenant, key="k", payload={"a": 1}, produce=counting_producer(calls, {"n": 2})) == (
        201,
        {"n": 1},
        True,
    )
    assert len(calls) == 1
    with pytest.raises(IdempotencyConflict):
        idempotent(tenant=tenant, key="k", payload={"a": 2}, produce=counting_producer(calls, {}))


def test_a_failed_produce_leaves_the_key_unused(tenant):
    def fail():
        raise ValueError("invalid")

    with pytest.raises(ValueError):
        idempotent(tenant=tenant, key="k", payload={}, produce=fail)
    assert not IdempotencyRecord.objects.exists()
    assert idempotent(tenant=tenant, key="k", payload={}, produce=lambda: (201, {"ok": True}))[2] is False


def test_an_expired_key_is_taken_over_by_a_new_body(tenant, other_tenant):
    idempotent(tenant=tenant, key="k", payload={"old": True}, produce=lambda: (201, {"old": True}))
    idempotent(tenant=other_tenant, key="k", payload={"theirs": True}, produce=lambda: (201, {"theirs": True}))
    IdempotencyRecord.objects.filter(tenant=tenant).update(created_at=timezone.now() - KEY_LIFETIME - timedelta(1))
    assert idempotent(tenant=tenant, key="k", payload={"new": True}, produce=lambda: (201, {"new": True})) == (
        201,
        {"new": True},
        False,
    )
    record = IdempotencyRecord.objects.get(tenant=tenant, key="k")
    assert record.response_body == {"new": True} and timezone.now() - record.created_at < timedelta(minutes=1)
    assert IdempotencyRecord.objects.get(tenant=other_tenant).response_body == {"theirs": True}, "not expired"


@pytest.mark.django_db(transaction=True)
def test_requests_racing_with_one_key_produce_once_and_the_others_replay(tenant):
    barrier, outcomes, calls = threading.Barrier(6), [], []

    def produce():
        calls.append(1)
        return 201, {"made": True}

    def request():
        try:
            barrier.wait()
            outcomes.append(idempotent(tenant=tenant, key="race", payload={"x": 1}, produce=produce))
        finally:
            connection.close()

    threads = [threading.Thread(target=request) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(calls) == 1
    assert sorted(replayed for _, _, replayed in outcomes) == [False] + [True] * 5
    assert {(status, tuple(body.items())) for status, body, _ in outcomes} == {(201, (("made", True),))}
