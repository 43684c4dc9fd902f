"""A row held by another session, for tests of who waits for whom (the lock order)."""

import threading
from contextlib import contextmanager

from django.db import connection, connections, transaction


@contextmanager
def row_held_elsewhere(model, pk, *, lock_timeout: str | None = None):
    """Another session holds `model`'s row `pk` FOR UPDATE (as a claim, or a delete of a job, holds
    it) until the block ends. `lock_timeout`: set on this test's session for the block, so a
    statement that would wait for the row fails instead."""
    held, done = threading.Event(), threading.Event()

    def hold():
        try:
            with transaction.atomic():
                list(model.objects.select_for_update().filter(pk=pk))
                held.set()
                done.wait(10)
        finally:
            connections.close_all()

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert held.wait(10)
        if lock_timeout:
            with connection.cursor() as cursor:
                cursor.execute("SET lock_timeout = %s", [lock_timeout])
        yield
    finally:
        if lock_timeout:
            with connection.cursor() as cursor:
                cursor.execute("SET lock_timeout = 0")
        done.set()
        thread.join(10)
