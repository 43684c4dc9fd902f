"""apps/core/events.py: run events published per tenant over Redis, best effort."""

import json
import time

import pytest
import redis
from django.conf import settings

from apps.core import events

pytestmark = pytest.mark.usefixtures("redis_reachable")


def subscriber(*tenant_ids):
    pubsub = redis.Redis.from_url(settings.REDIS_URL).pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(*[events.channel_for(t) for t in tenant_ids])
    return pubsub


def messages(pubsub, timeout=1.0):
    """Everything that arrives within `timeout` seconds (subscribe confirmations are skipped)."""
    got, deadline = [], time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        message = pubsub.get_message(timeout=left)
        if message is not None:
            got.append((message["channel"].decode(), json.loads(message["data"])))
    return got


def test_changes_go_to_their_tenants_channel_only():
    pubsub = subscriber("tenant-a", "tenant-b")
    events.runs_changed([("tenant-a", "run-1", "queued"), ("tenant-a", "run-2"), ("tenant-b", "run-3", "failed")])
    got = dict(messages(pubsub))
    assert got[events.channel_for("tenant-a")] == {"runs": [["run-1", "queued"], ["run-2", None]]}
    assert got[events.channel_for("tenant-b")] == {"runs": [["run-3", "failed"]]}


def test_big_changes_are_split_into_several_messages():
    pubsub = subscriber("tenant-big")
    events.runs_changed([("tenant-big", f"run-{i}") for i in range(events.MAX_RUNS_PER_MESSAGE + 10)])
    got = messages(pubsub)
    assert [len(body["runs"]) for _, body in got] == [events.MAX_RUNS_PER_MESSAGE, 10]


def test_decode_is_lenient():
    assert events.decode(events.encode([("r", "queued")])) == [("r", "queued")]
    assert events.decode(b"not json") == []
    assert events.decode(b'{"runs": [[]]}') == []


def test_an_unreachable_redis_never_breaks_the_writer(settings, monkeypatch):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    monkeypatch.setattr(events, "_client", None)
    events.runs_changed([("t", "r")])  # logs a warning, raises nothing


def test_without_redis_it_is_a_no_op(settings, monkeypatch):
    settings.REDIS_URL = ""
    monkeypatch.setattr(events, "_redis", lambda: pytest.fail("no Redis in embedded mode"))
    events.runs_changed([("t", "r")])


def test_a_forked_process_makes_its_own_client(monkeypatch):
    first = events._redis()
    monkeypatch.setattr(events, "_client_pid", -1)  # as if this process were a fork of another
    assert events._redis() is not first


@pytest.mark.django_db(transaction=True)
def test_on_commit_publishes_only_after_the_commit():
    from django.db import transaction

    pubsub = subscriber("tenant-tx")
    with transaction.atomic():
        events.runs_changed_on_commit([("tenant-tx", "run-1")])
        assert messages(pubsub, timeout=0.3) == []
    assert len(messages(pubsub)) == 1
    try:
        with transaction.atomic():
            events.runs_changed_on_commit([("tenant-tx", "run-2")])
            raise RuntimeError
    except RuntimeError:
        pass
    assert messages(pubsub, timeout=0.3) == []


@pytest.fixture
def redis_up(monkeypatch):
    monkeypatch.setattr(events, "_down_until", 0.0)  # a test above made this process leave Redis alone


def test_a_batched_block_publishes_once_at_its_end_one_message_per_tenant(redis_up):
    pubsub = subscriber("tenant-a", "tenant-b")
    with events.batched():
        events.runs_changed([("tenant-a", "run-1"), ("tenant-b", "run-3", "cancelled")])
        with events.batched():  # nested: published with the outer block
            events.runs_changed([("tenant-a", "run-2")])
        assert messages(pubsub, timeout=0.3) == [], "nothing before the block ends"
        events.runs_changed([("tenant-a", "run-1"), ("tenant-b", "run-3")])  # again: named once
    got = messages(pubsub)
    assert sorted(got) == [
        (events.channel_for("tenant-a"), {"runs": [["run-1", None], ["run-2", None]]}),
        (events.channel_for("tenant-b"), {"runs": [["run-3", "cancelled"]]}),
    ]


@pytest.mark.django_db(transaction=True)
def test_events_of_a_transaction_committed_in_a_batched_block_go_with_it(redis_up):
    from django.db import transaction

    pubsub = subscriber("tenant-c")
    with events.batched():
        with transaction.atomic():
            events.runs_changed_on_commit([("tenant-c", "run-9")])
        events.runs_changed([("tenant-c", "run-10")])
    assert messages(pubsub) == [(events.channel_for("tenant-c"), {"runs": [["run-9", None], ["run-10", None]]})]


def test_a_background_batch_is_published_by_the_publisher_thread(redis_up, monkeypatch):
    import threading

    publishing_threads = []
    publish = events._publish
    monkeypatch.setattr(
        events,
        "_publish",
        lambda changes: (
            publishing_threads.extend(threading.current_thread().name for c in changes if c[0] == "tenant-d"),
            publish(changes),
        ),
    )
    pubsub = subscriber("tenant-d")
    with events.batched(background=True):
        events.runs_changed([("tenant-d", "run-1"), ("tenant-d", "run-2", "failed")])
    assert messages(pubsub) == [(events.channel_for("tenant-d"), {"runs": [["run-1", None], ["run-2", "failed"]]})]
    # Other tests' windows may still publish in this process: only this test's changes are counted.
    assert publishing_threads == ["chime-events", "chime-events"]


def test_the_publisher_thread_publishes_at_most_once_per_window_and_loses_no_run(redis_up):
    pubsub = subscriber("tenant-e")
    messages(pubsub, timeout=2 * events.COALESCE_SECONDS)  # an earlier test's window has passed
    started = time.monotonic()
    for n in range(20):  # as the recorder hands them over at a spike: a step every 10 ms
        with events.batched(background=True):
            events.runs_changed([("tenant-e", f"run-{n}", "running")])
            if n:
                events.runs_changed([("tenant-e", f"run-{n - 1}", "succeeded")])
        time.sleep(0.01)
    with events.batched(background=True):
        events.runs_changed([("tenant-e", "run-19", "succeeded")])
    elapsed = time.monotonic() - started
    got = messages(pubsub, timeout=1.0)
    last_status = {}
    for _, message in got:
        last_status.update(dict(message["runs"]))
    assert last_status == {f"run-{n}": "succeeded" for n in range(20)}
    # Published one step at a time this was 21 messages in ~0.2 s.
    assert len(got) <= elapsed / events.COALESCE_SECONDS + 2, (len(got), elapsed)


def test_a_malformed_change_does_not_stop_the_publisher_thread(redis_up, caplog):
    pubsub = subscriber("tenant-f")
    with events.batched(background=True):
        events.runs_changed([("tenant-f",)])  # no run id: _publish raises on it
    messages(pubsub, timeout=2 * events.COALESCE_SECONDS)
    with events.batched(background=True):
        events.runs_changed([("tenant-f", "run-1", "succeeded")])
    assert messages(pubsub) == [(events.channel_for("tenant-f"), {"runs": [["run-1", "succeeded"]]})]
    assert "could not publish 1 run events" in caplog.text
