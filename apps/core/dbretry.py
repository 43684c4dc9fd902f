"""Riding out a database restart instead of failing the work in hand.

A worker that holds claimed runs, or an outcome an endpoint already gave, must not drop them
because PostgreSQL restarted for a few seconds: it would park the runs until a lease expires
(charging an attempt for a request never sent) or send a delivered webhook again. So the worker
retries such steps until the database answers, within a deadline. The pool checks connections as
they leave it, so the first try after the database returns gets a working one.
"""

import logging
import time
from collections.abc import Callable
from typing import TypeVar

import psycopg
from django.db import InterfaceError, OperationalError, close_old_connections, connection

logger = logging.getLogger(__name__)

T = TypeVar("T")
# psycopg's own classes too: a raw COPY (apps/delivery/outcomes.py) raises them unwrapped, e.g.
# AdminShutdown when PostgreSQL restarts mid-write.
TRANSIENT = (OperationalError, InterfaceError, psycopg.OperationalError, psycopg.InterfaceError)


def with_db_retry(fn: Callable[[], T], *, what: str, deadline_seconds: float, first_delay: float = 0.2) -> T:
    """Call `fn` until it does not raise a connection-level database error, or the deadline passes
    (then the last error is raised). `fn` must be safe to repeat: a transaction that failed was
    rolled back, and one whose COMMIT failed may have committed (write `fn` so a repeat sees that).
    Must not be called inside an atomic block: a broken connection cannot be replaced there."""
    deadline = time.monotonic() + deadline_seconds
    delay = first_delay
    failures = 0
    while True:
        try:
            result = fn()
        except TRANSIENT as exc:
            failures += 1
            if time.monotonic() + delay > deadline:
                logger.error("%s: database unavailable for %.0f s, giving up: %s", what, deadline_seconds, exc)
                raise
            if failures == 1:
                logger.warning("%s: database unavailable (%s); retrying until it answers", what, exc)
            _discard_connection()
            time.sleep(delay)
            delay = min(delay * 2, 2.0)
            continue
        if failures:
            logger.info("%s: database answered again after %d failed tries", what, failures)
        return result


def _discard_connection() -> None:
    try:
        connection.close()
    except Exception:  # a broken connection may fail to close; it is dropped anyway
        logger.debug("closing a broken connection failed", exc_info=True)
    close_old_connections()
