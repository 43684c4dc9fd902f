"""config.asgi's HTTP handler (apps/core/asgi_handler.py): the same answers as Django's stock
ASGIHandler, with the middleware chain and the view in one thread hop instead of a dozen.

Requests go through the real ASGI application (asgiref.testing.ApplicationCommunicator), so the
handler's thread uses its own database connection: the data is committed (transaction=True)."""

import asyncio
import json
from collections import Counter

import pytest
from asgiref.sync import AsyncToSync, SyncToAsync
from asgiref.testing import ApplicationCommunicator
from django.core.handlers.asgi import ASGIHandler
from django.core.signals import request_finished
from django.templatetags.static import static

from apps.core.asgi_handler import OneHopASGIHandler
from apps.jobs.models import JobDefinition
from apps.tenants.services import api_key_create, tenant_create

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
    scope = {
        "type": "http", "http_version": "1.1", "method": method, "path": path, "raw_path": path.encode(),
        "query_string": b"", "headers": headers, "scheme": "http", "server": ("localhost", 80),
        "client": ("127.0.0.1", 5000),
    }  # fmt: skip
    return asyncio.run(_exchange(ApplicationCommunicator(app, scope), body))


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
    # The chain never goes back to the loop, and the thread is entered three times: the
    # request_started signal's receivers, the chain with its view, closing the response; however
    # many middleware there are. Django's own handler enters it for each middleware's hooks, one
    # by one (17 crossings for this create, measured).
    assert ours == {"sync_to_async": 3}
    assert hops["sync_to_async"] + hops["async_to_sync"] > 4 * ours["sync_to_async"]


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
