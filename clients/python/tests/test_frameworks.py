"""The drop-in helpers in real apps: Flask's and Starlette's/FastAPI's test clients send real
requests through the framework; each helper verifies, rejects, and runs the handler once per id."""

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient as FastAPIClient
from flask import Flask
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from chime_client.contrib.flask import webhook_handler
from chime_client.contrib.starlette import webhook_endpoint
from chime_client.dedupe import MemoryStore

from .signing import delivery, secret, tampered_signature


def flask_app(key, calls, fail_first=False):
    app = Flask(__name__)

    @app.post("/hook")
    @webhook_handler(key, store=MemoryStore())
    def hook(webhook):
        calls.append(webhook.id)
        if fail_first and len(calls) == 1:
            return "try again", 500
        return {"ok": webhook.id}

    return app.test_client()


class _Posting:
    """One interface over the three test clients: post(body, headers) -> (status, text)."""

    def __init__(self, client):
        self.client = client

    def post(self, body, headers):
        answer = (
            self.client.post("/hook", data=body, headers=headers)
            if hasattr(self.client, "application")
            else (self.client.post("/hook", content=body, headers=headers))
        )
        return answer.status_code


def starlette_app(key, calls, fail_first=False):
    @webhook_endpoint(key, store=MemoryStore())
    async def hook(request, webhook):
        calls.append(webhook.id)
        if fail_first and len(calls) == 1:
            return JSONResponse({"error": "later"}, status_code=503)
        return JSONResponse({"ok": webhook.id})

    return TestClient(Starlette(routes=[Route("/hook", hook, methods=["POST"])]))


def fastapi_app(key, calls, fail_first=False):
    app = FastAPI()

    @app.post("/hook")
    @webhook_endpoint(key, store=MemoryStore())
    def hook(request, webhook):  # a plain def: run in a thread
        calls.append(webhook.id)
        if fail_first and len(calls) == 1:
            raise RuntimeError("the handler crashed")
        return {"ok": webhook.id}

    return FastAPIClient(app, raise_server_exceptions=False)


APPS = {"flask": flask_app, "starlette": starlette_app, "fastapi": fastapi_app}


@pytest.fixture(params=list(APPS))
def make_app(request):
    return APPS[request.param]


def test_it_runs_the_handler_once_when_chime_delivers_twice(make_app):
    key, calls = secret(), []
    app = _Posting(make_app(key, calls))
    body, headers = delivery([key], msg_id="run-1")
    assert app.post(body, headers) == 200
    assert app.post(body, headers) == 200  # the duplicate is acknowledged...
    assert app.post(*delivery([key], msg_id="run-1")) == 200  # ... a re-signed retry too
    assert calls == ["run-1"]  # ... without calling the handler again
    assert app.post(*delivery([key], msg_id="run-2")) == 200
    assert calls == ["run-1", "run-2"]


def test_it_rejects_bad_signatures_stale_timestamps_and_non_webhooks(make_app):
    from datetime import UTC, datetime, timedelta

    key, calls = secret(), []
    app = _Posting(make_app(key, calls))
    body, headers = delivery([key])
    assert app.post(body, tampered_signature(headers)) == 401
    assert app.post(*delivery([secret()])) == 401
    assert app.post(*delivery([key], at=datetime.now(UTC) - timedelta(minutes=10))) == 401
    assert app.post(body, {"Content-Type": "application/json"}) == 400
    assert calls == []
    assert app.post(body, headers) == 200  # the rejections did not use up the id
    assert calls == ["run-1"]


def test_a_failed_handler_runs_again_on_chimes_retry(make_app):
    key, calls = secret(), []
    app = _Posting(make_app(key, calls, fail_first=True))
    assert app.post(*delivery([key], msg_id="run-3")) >= 500
    assert app.post(*delivery([key], msg_id="run-3")) == 200
    assert app.post(*delivery([key], msg_id="run-3")) == 200
    assert calls == ["run-3", "run-3"]


def test_a_rotation_is_followed_with_a_callable_secret():
    old, new = secret(), secret()
    current = [old]
    calls = []

    @webhook_endpoint(lambda: current, store=MemoryStore())
    async def hook(request, webhook):
        calls.append(webhook.id)
        return JSONResponse({})

    client = TestClient(Starlette(routes=[Route("/hook", hook, methods=["POST"])]))
    assert (
        client.post("/hook", content=delivery([new], msg_id="a")[0], headers=delivery([new], msg_id="a")[1]).status_code
        == 401
    )
    current.append(new)
    body, headers = delivery([new, old], msg_id="a")
    assert client.post("/hook", content=body, headers=headers).status_code == 200
    assert calls == ["a"]
