"""The worker survives losing Redis while it holds unacknowledged messages (config/kombu_fixes.py).

Replays, on a private redis-server that the test kills, what Celery 5.7's consumer does when the
broker connection breaks (`Consumer.on_connection_error_after_connected`): `collect()`, then
`ignore_errors(connection, connection.close)`, and then its bootsteps close the channels they hold
(the pidbox's, gossip's, the task consumer's) with `ignore_errors` too. Without the fix one of
those closes raises AttributeError from kombu's `_connparams` and the worker process dies
("Unrecoverable error").
"""

import contextlib
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from kombu import Connection, Exchange, Queue
from kombu.common import ignore_errors
from kombu.transport import redis as kombu_redis

from bench.chaos.servers import RedisServer, make_workspace, remove_workspace
from config.kombu_fixes import guard_orphaned_channels

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def redis_server():
    workspace = make_workspace()
    server = RedisServer(workspace / "redis").start()
    try:
        yield server
    finally:
        server.stop()
        remove_workspace(workspace)


def _hold_unacked(connection: Connection, channels: list) -> None:
    """Like a prefetching worker: each channel holds one message it has not acknowledged."""
    for number, channel in enumerate(channels):
        queue = Queue(f"q{number}", Exchange(f"q{number}"), f"q{number}", channel=channel)
        queue.declare()
        with connection.Producer(channel=channel) as producer:
            producer.publish({"n": number}, exchange=queue.exchange, routing_key=queue.routing_key)
        assert queue.get(no_ack=False) is not None


def _lose_broker_like_celery(connection: Connection, channels: list, server: RedisServer) -> None:
    server.kill(signal.SIGKILL)
    with contextlib.suppress(Exception):  # Celery swallows whatever collect() raises, so does this
        connection.collect(socket_timeout=2)
    # None of these may raise: ignore_errors passes on anything but connection and channel errors.
    ignore_errors(connection, connection.close)
    for channel in channels:
        ignore_errors(connection, channel.close)


def test_closing_after_the_broker_died_raises_no_attribute_error(redis_server):
    guard_orphaned_channels()
    connection = Connection(redis_server.url)
    connection.ensure_connection(max_retries=3)
    channels = [connection.default_channel, connection.channel(), connection.channel()]
    _hold_unacked(connection, channels)

    _lose_broker_like_celery(connection, channels, redis_server)  # raised AttributeError before the fix


def test_without_the_guard_kombu_still_crashes(redis_server, monkeypatch):
    """Keeps the fix honest: when an upgraded kombu no longer needs it, this fails and says so."""
    original = getattr(kombu_redis.Channel._connparams, "__wrapped__", kombu_redis.Channel._connparams)
    monkeypatch.setattr(kombu_redis.Channel, "_connparams", original)
    connection = Connection(redis_server.url)
    connection.ensure_connection(max_retries=3)
    channels = [connection.default_channel, connection.channel(), connection.channel()]
    _hold_unacked(connection, channels)

    with pytest.raises(AttributeError, match="hostname"):
        _lose_broker_like_celery(connection, channels, redis_server)


def test_the_guard_is_installed_by_the_celery_app():
    """In a fresh interpreter, as `celery -A config worker` starts: importing the app installs it."""
    check = (
        "import config.celery; from kombu.transport import redis; "
        "print(getattr(redis.Channel._connparams, '_chime_orphan_guard', False))"
    )
    out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "True", out.stderr


def test_a_live_channel_still_connects(redis_server):
    guard_orphaned_channels()
    with Connection(redis_server.url) as connection:
        queue = Queue("live", Exchange("live"), "live", channel=connection.default_channel)
        queue.declare()
        with connection.Producer() as producer:
            producer.publish({"ok": True}, exchange=queue.exchange, routing_key=queue.routing_key)
        message = queue.get(no_ack=True)
        assert message.payload == {"ok": True}
