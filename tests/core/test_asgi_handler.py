"""config.asgi's HTTP handler (apps/core/asgi_handler.py): the same answers as Django's stock
ASGIHandler, with a request's synchronous work (signals, middleware chain, view) in one thread hop
instead of a dozen.

Requests go through the real ASGI application (asgiref.testing.ApplicationCommunicator), so the
handler's thread uses its own database connection: the data is committed (transaction=True)."""

import asyncio
import json
import threading
import time
from collections import Counter

import pytest
from asgiref.sync import AsyncToSync, SyncToAsync
from asgiref.testing import ApplicationCommunicator
from django.core.handlers.asgi import ASGIHandler
from django.core.signals import request_finished, request_started
from django.http import JsonResponse, StreamingHttpResponse
from django.templatetags.static import static
from django.test import override_settings
from django.urls import path

from apps.core.asgi_handler import OneHopASGIHandler
from apps.jobs.models import JobDefinition
from apps.tenants.services import api_key_create, tenant_create
from tests.support.asgi import http_scope

pytestmark = pytest.mark.django_db(transaction=True)

JOB = {
    "name": "nightly",
    "schedule": {"type": "cron", "expression": "0 3 * * *", "timezone": "Europe/Paris"},
    "target": {"url": "https://example.com/hook"},
}


@pytest.fixture
def key():
    return api_key_create(tenant=tenant_create(slug="hops", name="Hops")).raw_key


@pytest.fixture
def hops(monkeypatch) -> Counter:
    """How many times a request crosses between the event loop and a thread, each way."""
    counts = Counter()
    to_thread, to_loop = SyncToAsync.__call__, AsyncToSync.__call__

    async def counted_to_thread(self, *args, **kwargs):
        counts["sync_to_async"] += 1
        return await to_thread(self, *args, **kwargs)

    def counted_to_loop(self, *args, **kwargs):
        counts["async_to_sync"] += 1
        return to_loop(self, *args, **kwargs)

    monkeypatch.setattr(SyncToAsync, "__call__", counted_to_thread)
    monkeypatch.setattr(AsyncToSync, "__call__", counted_to_loop)
    return counts


def _request(app, method: str, path: str, *, key: str = "", body: bytes = b"") -> dict:
    headers = [(b"host", b"localhost")]
    if key:
        headers.append((b"authorization", f"Bearer {key}".encode()))
    if body:
        kind = b"application/json" if body[:1] in (b"{", b"[") else b"application/x-www-form-urlencoded"
        headers += [(b"content-type", kind), (b"content-length", str(len(body)).encode())]
    return asyncio.run(_exchange(ApplicationCommunicator(app, http_scope(method, path, headers)), body))


async def _exchange(communicator: ApplicationCommunicator, body: bytes) -> dict:
    """The response's start and its body parts (a final part may carry no `body`, as ASGI allows
    and Django's file responses do; channels' HttpCommunicator expects one)."""
    await communicator.send_input({"type": "http.request", "body": body})
    start = await communicator.receive_output(10)
    assert start["type"] == "http.response.start"
    response = {"status": start["status"], "headers": start.get("headers", []), "body": b""}
    while True:
        part = await communicator.receive_output(10)
        assert part["type"] == "http.response.body"
        response["body"] += part.get("body", b"")
        if not part.get("more_body", False):
            break
    await communicator.wait(10)  # the handler closes the response (request_finished) after sending it
    return response


def _names(response: dict) -> set[bytes]:
    return {name.lower() for name, _ in response["headers"]}


def _cookies(response: dict) -> set[bytes]:
    return {value.split(b"=", 1)[0] for name, value in response["headers"] if name.lower() == b"set-cookie"}


def test_the_chain_and_the_view_take_one_hop(key, hops):
    body = json.dumps(JOB).encode()
    response = _request(OneHopASGIHandler(), "POST", "/api/v1/jobs", key=key, body=body)
    assert response["status"] == 201
    ours = Counter(hops)
    hops.clear()
    stock = _request(ASGIHandler(), "POST", "/api/v1/jobs", key=key, body=body)
    assert stock["status"] == 201
    # The chain never goes back to the loop, and the thread is entered once: the request_started
    # signal's receivers, the chain with its view and closing the response in one call, however
    # many middleware there are. Django's own handler enters it for each middleware's hooks, one
    # by one, and for each signal (17 crossings for this create, measured).
    assert ours == {"sync_to_async": 1}
    assert hops["sync_to_async"] + hops["async_to_sync"] > 10 * ours["sync_to_async"]


@pytest.mark.parametrize(
    ("method", "path", "authenticated", "body", "status"),
    [
        ("GET", "/healthz", False, b"", 200),
        ("GET", "/api/v1/jobs", True, b"", 200),
        ("GET", "/api/v1/jobs", False, b"", 401),
        ("GET", "/api/v1/no-such-thing", True, b"", 404),
        ("POST", "/api/v1/jobs", True, json.dumps(JOB).encode(), 201),
        ("POST", "/api/v1/jobs", True, b'{"name": 7}', 400),
        ("GET", "/login/", False, b"", 200),
        ("POST", "/login/", False, b"username=a&password=b", 403),  # no CSRF token: refused
        ("GET", "/", False, b"", 302),  # to the login page
    ],
)
def test_answers_as_djangos_own_handler(key, method, path, authenticated, body, status):
    answers, finished = [], []
    request_finished.connect(lambda sender, **kwargs: finished.append(sender), weak=False, dispatch_uid="asgi-test")
    try:
        for handler in (ASGIHandler(), OneHopASGIHandler()):
            JobDefinition.objects.all().delete()
            answers.append(_request(handler, method, path, key=key if authenticated else "", body=body))
    finally:
        request_finished.disconnect(dispatch_uid="asgi-test")
    stock, ours = answers
    assert stock["status"] == status
    assert len(finished) == 2  # each request finished: its database connection went back to the pool
    assert ours["status"] == stock["status"]
    assert _names(ours) == _names(stock)
    assert _cookies(ours) == _cookies(stock)
    if path != "/login/":  # the login page carries a fresh CSRF token each time
        assert _stable(ours["body"]) == _stable(stock["body"])


def _stable(body: bytes):
    """A JSON body without the values that differ between two creates (ids, times)."""
    try:
        data = json.loads(body)
    except ValueError:
        return body
    if isinstance(data, dict):
        return {k: v for k, v in data.items() if k not in ("id", "created_at", "updated_at", "next_fire_at")}
    return data


def test_a_static_file_is_served_whole():
    response = _request(OneHopASGIHandler(), "GET", static("dashboard/dashboard.css"))
    assert response["status"] == 200
    headers = {name.lower(): value for name, value in response["headers"]}
    assert headers[b"content-type"].startswith(b"text/css")
    assert len(response["body"]) == int(headers[b"content-length"]) > 0


def test_config_asgi_serves_http_with_it():
    from config.asgi import django_asgi_app

    assert isinstance(django_asgi_app, OneHopASGIHandler)


# --- Order of the signals and the sending; a client that leaves ----------------------------------

hold_view = threading.Event()
held_views = []


def instant(request):
    return JsonResponse({"ok": True})


def held(request):
    hold_view.wait(10)
    held_views.append(request.path)
    return JsonResponse({"ok": True})


def streamed(request):
    async def chunks():
        for n in range(1000):
            yield f"chunk {n}\n".encode()
            await asyncio.sleep(0.01)

    return StreamingHttpResponse(chunks())


urlpatterns = [path("instant", instant), path("held", held), path("streamed", streamed)]


async def _serve(app, url: str, *, leave: asyncio.Event, events: list) -> None:
    """One GET through `app`, noting the messages sent and the signals in `events`; the client
    leaves (http.disconnect) once `leave` is set."""
    sent_request = False

    async def receive():
        nonlocal sent_request
        if not sent_request:
            sent_request = True
            return {"type": "http.request", "body": b""}
        await leave.wait()
        return {"type": "http.disconnect"}

    async def send(message):
        events.append(message["type"])

    await asyncio.wait_for(app(http_scope("GET", url), receive, send), 20)


@pytest.fixture
def signalled():
    events = []
    request_started.connect(lambda **kw: events.append("started"), weak=False, dispatch_uid="order-s")
    request_finished.connect(lambda **kw: events.append("finished"), weak=False, dispatch_uid="order-f")
    yield events
    request_started.disconnect(dispatch_uid="order-s")
    request_finished.disconnect(dispatch_uid="order-f")


@override_settings(ROOT_URLCONF=__name__)
def test_a_response_is_closed_before_it_is_sent_a_streamed_one_after(signalled):
    asyncio.run(_serve(OneHopASGIHandler(), "/instant", leave=asyncio.Event(), events=signalled))
    # request_finished (the database connection back to the pool) before the first byte goes out
    assert signalled == ["started", "finished", "http.response.start", "http.response.body"]
    signalled.clear()
    response = _request(OneHopASGIHandler(), "GET", static("dashboard/dashboard.css"))
    assert response["status"] == 200
    assert signalled[0] == "started" and signalled[-1] == "finished" and signalled.count("finished") == 1


@override_settings(ROOT_URLCONF=__name__)
def test_a_request_received_whole_is_served_even_if_its_client_leaves_at_once(signalled):
    """Django's own handler may drop such a request unseen (the disconnect cancels its view before
    the view starts): a create sent whole, then the connection lost, was done or not by chance.
    Here a request received whole always runs to its end; nothing is sent to the absent client."""
    hold_view.clear()
    views_ended = len(held_views)

    async def scenario():
        leave = asyncio.Event()
        leave.set()  # the disconnect is there as soon as the request is
        serving = asyncio.ensure_future(_serve(OneHopASGIHandler(), "/held", leave=leave, events=signalled))
        await asyncio.sleep(0.2)
        assert not serving.done()  # the view runs, holding
        hold_view.set()
        await serving

    asyncio.run(scenario())
    assert len(held_views) == views_ended + 1
    assert signalled == ["started", "finished"]  # nothing sent, the connection given back once


@override_settings(ROOT_URLCONF=__name__)
def test_a_streamed_response_stops_when_its_client_leaves(signalled):
    async def scenario():
        leave = asyncio.Event()
        serving = asyncio.ensure_future(_serve(OneHopASGIHandler(), "/streamed", leave=leave, events=signalled))
        while signalled.count("http.response.body") < 3:
            await asyncio.sleep(0.01)
        leave.set()
        await serving  # well before the 1,000 chunks' 10 s

    started = time.monotonic()
    asyncio.run(scenario())
    assert time.monotonic() - started < 5
    assert signalled.count("finished") == 1 and signalled[-1] == "finished"
    assert signalled.count("http.response.body") < 1000
