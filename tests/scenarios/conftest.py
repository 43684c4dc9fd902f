import pytest

from tests.support.processes import start_scheduler, start_worker

# Short leases and sweeps so failure scenarios resolve in seconds.
FAST = {
    "CHIME_RUN_LEASE_SECONDS": "3",
    "CHIME_RUN_LEASE_RENEW_SECONDS": "1",
    "CHIME_SWEEP_INTERVAL_SECONDS": "1",
    "CHIME_REQUEUE_AFTER_SECONDS": "10",
}


@pytest.fixture
def chime(transactional_db):
    """A scheduler and a worker (queues high and default) for one test.

    Per test, and stopped before the database is flushed (this fixture is torn down first): a
    flush (TRUNCATE of every table) racing a live scheduler's transactions can deadlock."""
    import redis
    from django.conf import settings

    from tests.conftest import _require

    _require("Redis", settings.REDIS_URL, 6379)
    redis.Redis.from_url(settings.REDIS_URL).flushdb()
    processes = {"worker": start_worker(queues="runs.high,runs.default", **FAST), "scheduler": start_scheduler(**FAST)}
    yield processes  # a test may swap in processes of its own; stop whatever is there at the end
    for process in processes.values():
        process.stop()
