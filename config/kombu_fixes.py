"""A fix for kombu's Redis transport, applied when the Celery app is imported (config/celery.py).

The bug (kombu 5.7.0, the newest release; seen in bench/chaos's Redis-restart scenario, about one
run in five on two busy cores): when the broker goes away, Celery 5.7's consumer calls
`Connection.collect()` and then `Connection.close()` (`on_connection_error_after_connected`).
`collect()` closes the channels while Redis is down: the first channel holding unacknowledged
messages fails to restore them, which aborts `Transport.close_connection` and leaves the other
channels open, and then it detaches the transport from its connection (`transport.client = None`).
Closing one of the channels left over (the consumer's default channel, in `close()`) tries to
restore its unacked messages through a new Redis pool, whose parameters come from
`transport.client`: `AttributeError: 'NoneType' object has no attribute 'hostname'`. AttributeError
is neither a connection nor a channel error, so `ignore_errors` lets it through and the worker
stops with "Unrecoverable error", never to reconnect.

The fix: a channel whose connection is gone raises the transport's own connection error instead,
which every close path already ignores, and the worker reconnects. Nothing is lost by not
restoring those messages from the closing channel: they stay in Redis's unacked hash and are
restored by `restore_visible` after the visibility timeout, and Chime republishes its runs itself
after a broker loss (apps/delivery/enqueue.py `broker_epoch`). tests/delivery/test_kombu_fixes.py
reproduces the crash on a private Redis and fails without this module.
"""

from kombu.transport import redis as kombu_redis

_MARK = "_chime_orphan_guard"


def guard_orphaned_channels() -> None:
    """Make `Channel._connparams` raise redis's ConnectionError on a detached transport. Idempotent."""
    original = kombu_redis.Channel._connparams
    if getattr(original, _MARK, False):
        return

    def _connparams(self, asynchronous=False):
        transport = self.connection
        if transport is None or transport.client is None:
            raise kombu_redis.exceptions.ConnectionError(
                "the broker connection of this channel was closed; it can no longer reach Redis"
            )
        return original(self, asynchronous=asynchronous)

    setattr(_connparams, _MARK, True)
    _connparams.__wrapped__ = original
    _connparams.__doc__ = original.__doc__
    kombu_redis.Channel._connparams = _connparams
