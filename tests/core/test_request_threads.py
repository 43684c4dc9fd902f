"""The web's request threads (apps/core/asgi_handler.py, RequestThreads): a request's synchronous
parts run in one thread of its own, kept for the next request once it is idle, never shared by two
requests at once, and never a cap on how many requests run at once.

Requests go through the real handler (asgiref.testing.ApplicationCommunicator) with a URLconf of
this module's views, which say which thread ran them; the last test goes through a real uvicorn,
with bursts and clients that leave before their answer."""

import asyncio
import http.client
import json
import socket
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from asgiref.testing import ApplicationCommunicator
from django.core.signals import request_finished
from django.db import connection
from django.http import JsonResponse
from django.test import override_settings
from django.urls import path

from apps.core.asgi_handler import OneHopASGIHandler, RequestThreads
from apps.tenants.services import api_key_create
from tests.support.asgi import http_scope
from tests.support.processes import wait_until
from tests.support.web import serving

pytestmark = pytest.mark.django_db(transaction=True)

AT_ONCE = 6
together = threading.Barrier(AT_ONCE, timeout=10)
held = threading.Event()
holding = threading.Event()
_mark = threading.local()


def thread_mark() -> str:
    """This thread's own name for itself: unlike `threading.get_ident()`, which the system gives
    again to a thread started after another ended, no later thread has it."""
    if not hasattr(_mark, "name"):
        _mark.name = uuid.uuid4().hex
    return _mark.name


def where(request):
    """The thread that ran the view (which used the database, as a view does)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"thread": thread_mark()})


def all_at_once(request):
    together.wait()  # breaks (BrokenBarrierError, a 500) unless AT_ONCE views run at the same time
    return where(request)


def hold(request):
    holding.set()
    held.wait(10)
    return where(request)


urlpatterns = [path("where", where), path("together", all_at_once), path("hold", hold)]


async def _get(app, url: str) -> dict:
    communicator = ApplicationCommunicator(app, http_scope("GET", url))
    await communicator.send_input({"type": "http.request", "body": b""})
    start = await communicator.receive_output(10)
    body = await communicator.receive_output(10)
    await communicator.wait(10)
    assert start["status"] == 200, body
    return json.loads(body["body"])


@pytest.fixture
def app():
    with override_settings(ROOT_URLCONF=__name__):
        yield OneHopASGIHandler()


@pytest.fixture
def finished_on() -> list:
    """The threads request_finished ran in (it gives the database connection back)."""
    threads = []
    request_finished.connect(lambda **kw: threads.append(thread_mark()), weak=False, dispatch_uid="rt")
    yield threads
    request_finished.disconnect(dispatch_uid="rt")


def test_one_thread_serves_one_request_after_another(app, finished_on):
    seen = [asyncio.run(_get(app, "/where")) for _ in range(5)]
    threads = {answer["thread"] for answer in seen}
    assert len(threads) == 1  # Django's stock handler starts (and joins) a new one per request
    assert threads != {thread_mark()}
    # request_finished ran where the view ran: the view's connection went back to the pool there.
    assert set(finished_on) == threads


def test_requests_at_once_each_get_a_thread_of_their_own(app):
    async def burst():
        return await asyncio.gather(*(_get(app, "/together") for _ in range(AT_ONCE)))

    first = asyncio.run(burst())
    assert len({answer["thread"] for answer in first}) == AT_ONCE
    # Kept for the next burst: the same threads serve it, and none more is started.
    assert app.threads.idle() == AT_ONCE
    second = asyncio.run(burst())
    assert {answer["thread"] for answer in second} == {answer["thread"] for answer in first}


def test_a_busy_thread_is_not_lent_to_another_request(app):
    held.clear()
    holding.clear()

    async def scenario():
        slow = asyncio.ensure_future(_get(app, "/hold"))
        await asyncio.to_thread(holding.wait, 10)
        quick = await _get(app, "/where")  # must not wait behind the held view
        assert not slow.done()
        held.set()
        return await slow, quick

    slow, quick = asyncio.run(scenario())
    assert slow["thread"] != quick["thread"]
    assert app.threads.idle() == 2


def test_a_thread_comes_back_only_once_idle():
    threads = RequestThreads(keep=4)
    thread = threads.lend()
    gate = threading.Event()
    running = thread.submit(gate.wait, 10)  # a call its request left behind (the client went away)
    thread.give_back()
    assert threads.idle() == 0  # still busy: not lent to anyone
    gate.set()
    running.result(10)
    deadline = time.monotonic() + 10
    while threads.idle() == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert threads.idle() == 1
    assert threads.lend() is thread


def test_idle_threads_past_the_bound_are_shut_down():
    threads = RequestThreads(keep=2)
    lent = [threads.lend() for _ in range(4)]
    for thread in lent:
        thread.submit(lambda: None).result(10)
    for thread in lent:
        thread.give_back()
    assert threads.idle() == 2
    kept = [threads.lend(), threads.lend()]
    assert set(map(id, kept)) == set(map(id, lent[:2]))
    for thread in lent[2:]:
        with pytest.raises(RuntimeError):  # shut down: its thread has ended
            thread.submit(lambda: None)


# --- Served by uvicorn, as the Procfile runs it --------------------------------------------------

POOL = 3  # the web's database pool for these tests: a connection kept by a request shows at once


@pytest.fixture(scope="module")
def served(django_db_setup):  # after the test database is set up: the server is pointed at it
    env = {"CHIME_DB_POOL_MAX_SIZE": str(POOL), "CHIME_DB_POOL_TIMEOUT_SECONDS": "5"}
    with serving("web-threads", **env) as web:
        yield web.port, web.process.popen.pid


def _threads_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no thread count")


def _list_jobs(port: int, key: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", "/api/v1/jobs", headers={"Authorization": f"Bearer {key}"})
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def _walk_away(port: int, key: str) -> None:
    """A client that sends its request and leaves before the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(f"GET /api/v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n\r\n".encode())


def test_served_threads_stay_bounded_and_connections_go_back(served, tenant):
    port, pid = served
    key = api_key_create(tenant=tenant).raw_key
    assert _list_jobs(port, key) == 200
    before = _threads_of(pid)  # one request thread kept, the pool's and the server's own
    with ThreadPoolExecutor(max_workers=40) as clients:
        for _ in range(3):
            answers = list(clients.map(lambda _: _list_jobs(port, key), range(40)))
            assert answers == [200] * 40  # 40 at once through a pool of 3: each gave its connection back
            list(clients.map(lambda _: _walk_away(port, key), range(20)))
    # Every request the clients left ended too: the pool has all its connections again, or these
    # would wait 5 s for one and fail.
    assert [_list_jobs(port, key) for _ in range(2 * POOL)] == [200] * (2 * POOL)
    # The burst's threads did not stay: at most twice the pool is kept idle.
    wait_until(lambda: _threads_of(pid) <= before + 2 * POOL, 10, message="threads back within the bound")
