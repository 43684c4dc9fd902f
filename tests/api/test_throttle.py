"""The API rate limit is the tenant's, counted atomically across keys and web processes.

The main test drives a real uvicorn with two worker processes (so two interpreters share only
Redis) from 16 threads over 3 keys of one tenant against 300/min: a per-key budget would pass
900, and a read-then-write counter lets concurrent requests slip through (the 1,713 of 1,200).
"""

import http.client
import threading
import time

import pytest
import redis
from django.conf import settings

from apps.tenants.services import api_key_create
from tests.support.web import serving

THREADS, KEYS, REQUESTS_PER_THREAD = 16, 3, 40  # 640 requests, well within one minute
LIMIT = 300


@pytest.fixture(autouse=True)
def clean_limits():
    client = redis.Redis.from_url(settings.REDIS_URL)
    for key in client.scan_iter("chime:limit:*"):
        client.delete(key)


@pytest.fixture
def web():
    """uvicorn with 2 worker processes; the API limit 300/min for every tenant."""
    with serving("web-throttle", workers=2, CHIME_API_RATE_LIMIT=f"{LIMIT}/min") as web:
        yield web.port


def get(conn: http.client.HTTPConnection, key: str, path: str = "/api/v1/jobs"):
    conn.request("GET", path, headers={"Authorization": f"Bearer {key}"})
    response = conn.getresponse()
    response.read()
    return response.status, response.getheader("Retry-After")


@pytest.mark.django_db(transaction=True)
def test_16_threads_over_3_keys_of_one_tenant_pass_at_most_the_tenants_limit(web, tenant, other_tenant):
    keys = [api_key_create(tenant=tenant).raw_key for _ in range(KEYS)]
    other_key = api_key_create(tenant=other_tenant).raw_key
    statuses, retry_afters, lock = [], [], threading.Lock()
    barrier = threading.Barrier(THREADS)

    def client(index):
        conn = http.client.HTTPConnection("127.0.0.1", web, timeout=30)
        barrier.wait()
        try:
            for _ in range(REQUESTS_PER_THREAD):
                status, retry_after = get(conn, keys[index % KEYS])
                with lock:
                    statuses.append(status)
                    if status == 429:
                        retry_afters.append(retry_after)
        finally:
            conn.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)

    passed = statuses.count(200)
    print(f"{passed} of {len(statuses)} requests passed ({THREADS} threads, {KEYS} keys, {LIMIT}/min)")
    assert len(statuses) == THREADS * REQUESTS_PER_THREAD
    assert set(statuses) <= {200, 429}, sorted(set(statuses))
    assert passed <= LIMIT * 1.1, f"{passed} of {len(statuses)} passed a {LIMIT}/min limit"
    assert passed >= LIMIT * 0.8, f"only {passed} passed: the limit refuses more than it should"
    assert retry_afters and all(value is not None and 1 <= int(value) <= 60 for value in retry_afters)

    conn = http.client.HTTPConnection("127.0.0.1", web, timeout=30)
    try:
        fresh_key = api_key_create(tenant=tenant).raw_key
        assert get(conn, fresh_key)[0] == 429, "a new key of the same tenant has no budget of its own"
        assert get(conn, other_key)[0] == 200, "another tenant is not affected"
    finally:
        conn.close()


def test_a_429_names_the_limit_and_says_when_to_come_back(api, other_api, settings):
    settings.CHIME_API_RATE_LIMIT = "3/min"
    assert [api.get("/api/v1/jobs").status_code for _ in range(3)] == [200, 200, 200]
    limited = api.get("/api/v1/jobs")
    assert limited.status_code == 429
    assert 1 <= int(limited.headers["Retry-After"]) <= 60
    error = limited.json()["error"]
    assert error["code"] == "throttled"
    assert error["limit"] == {"name": "api_rate", "value": "3/min"}
    assert other_api.get("/api/v1/jobs").status_code == 200


def test_the_window_slides_instead_of_resetting_at_a_boundary(settings):
    """At most `limit` in any window: a burst at the end of one window leaves nothing for the
    start of the next (a fixed window would pass twice the limit around its boundary)."""
    from apps.tenants.ratelimit import acquire

    name = f"test-slide:{time.monotonic_ns()}"
    assert all(acquire(name, limit=5, ttl_seconds=1.5).allowed for _ in range(5))
    refused = acquire(name, limit=5, ttl_seconds=1.5)
    assert not refused.allowed and refused.retry_after_seconds >= 1
    time.sleep(0.8)
    assert not acquire(name, limit=5, ttl_seconds=1.5).allowed, "still within 1.5 s of the burst"
    time.sleep(1.0)
    assert acquire(name, limit=5, ttl_seconds=1.5).allowed, "the burst left the window"


@pytest.mark.parametrize("backend", ["redis", "memory"])
def test_concurrent_hits_never_pass_more_than_the_limit(backend, settings):
    """16 threads at once, in Redis and in the embedded mode's process memory (no REDIS_URL)."""
    from apps.tenants.ratelimit import acquire, reset_local

    if backend == "memory":
        settings.REDIS_URL = ""
        reset_local()
    name = f"test-race:{backend}:{time.monotonic_ns()}"
    barrier, allowed, lock = threading.Barrier(16), [], threading.Lock()

    def hit():
        barrier.wait()
        for _ in range(20):
            decision = acquire(name, limit=50, ttl_seconds=60)
            with lock:
                allowed.append(decision.allowed)

    threads = [threading.Thread(target=hit) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert allowed.count(True) == 50 and len(allowed) == 320


class RefusingRedis:
    """A TCP port that accepts and at once closes every connection, counting them: a Redis that is
    down but answers fast (nothing listening would be as fast; this one also counts the tries)."""

    def __init__(self):
        import socket

        self.tries = 0
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                connection, _ = self._server.accept()
            except OSError:
                return
            self.tries += 1
            connection.close()

    def close(self):
        self._server.close()


def test_with_redis_unreachable_the_limit_is_counted_in_the_process_and_redis_left_alone(api, caplog, settings):
    """A Redis outage must neither lock every tenant out of the API nor lift the limits: the web
    process counts on its own, and for a few seconds after a failed call it does not try Redis
    again (each request used to wait for its own connection timeout)."""
    import os

    from apps.core import events

    settings.CHIME_API_RATE_LIMIT = "3/min"
    down = RefusingRedis()
    with events._client_lock:
        saved = events._client, events._client_pid
        events._client = redis.Redis(host="127.0.0.1", port=down.port, socket_connect_timeout=1, socket_timeout=1)
        events._client_pid = os.getpid()
    try:
        codes = [api.get("/api/v1/jobs").status_code]
        tries_after_first = down.tries
        codes += [api.get("/api/v1/jobs").status_code for _ in range(3)]
        tries_after_all = down.tries
    finally:
        with events._client_lock:
            events._client, events._client_pid = saved
        events._down_until = 0.0
        down.close()
    assert codes == [200, 200, 200, 429], "the limit held, counted in this process"
    assert tries_after_first >= 1, "the first request did try Redis"
    assert tries_after_all == tries_after_first, "the later ones did not"
    assert "counted in this process: Redis unavailable" in caplog.text


def test_the_limits_come_with_the_key_not_in_a_query_of_their_own(api, tenant):
    from django.db import connection

    from apps.tenants.models import TenantLimits

    TenantLimits.objects.create(tenant=tenant, api_rate_limit="1/min")
    statements = []

    def record(execute, sql, params, many, context):
        statements.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):  # the request's queries (reset_queries clears the log)
        assert api.get("/api/v1/jobs").status_code == 200
    assert api.get("/api/v1/jobs").status_code == 429, "the override was read"
    reading_limits = [sql for sql in statements if "tenants_tenantlimits" in sql]
    assert len(reading_limits) == 1 and "tenants_apikey" in reading_limits[0], "one query: the key's"
