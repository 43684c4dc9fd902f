"""Request bodies as a real uvicorn hands them to Chime: a chunked body (no Content-Length) is
read, not taken as empty, and nothing past the largest body Chime accepts is kept (Django's ASGI
handler would spool whatever a client sends to a temporary file before any limit is checked);
such a body gets a 413.

Through the Procfile's server (uvicorn, config.asgi), because the body is read by the ASGI handler
(apps/core/asgi_handler.py), which Django's test client does not use."""

import http.client
import json
import tempfile

import pytest
from django.conf import settings

from apps.jobs.models import JobDefinition
from apps.tenants.services import api_key_create
from tests.support.web import serving

pytestmark = pytest.mark.django_db(transaction=True)

JOB = {
    "name": "chunked",
    "schedule": {"type": "cron", "expression": "0 3 * * *", "timezone": "UTC"},
    "target": {"url": "https://example.com/hook"},
}


@pytest.fixture(scope="module")
def web(django_db_setup):  # after the test database is set up: the server is pointed at it
    with serving("web-bodies") as web:
        yield web.port


def _post(port: int, path: str, key: str, parts, *, chunked: bool) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    try:
        if chunked:
            conn.request("POST", path, body=iter(parts), headers=headers, encode_chunked=True)
        else:
            conn.request("POST", path, body=b"".join(parts), headers=headers)
        response = conn.getresponse()
        body = response.read()
    finally:
        conn.close()
    return response.status, json.loads(body) if body else {}


def test_a_chunked_body_is_read(web, tenant):
    key = api_key_create(tenant=tenant).raw_key
    data = json.dumps(JOB).encode()
    status, body = _post(web, "/api/v1/jobs", key, [data[:20], data[20:50], data[50:]], chunked=True)
    assert status == 201, body
    assert body["name"] == "chunked"
    assert JobDefinition.objects.filter(tenant=tenant, name="chunked").exists()


@pytest.mark.parametrize("chunked", [True, False])
def test_a_body_past_every_limit_is_refused_before_it_is_stored(web, tenant, chunked):
    key = api_key_create(tenant=tenant).raw_key
    cap = max(settings.DATA_UPLOAD_MAX_MEMORY_SIZE, settings.CHIME_API_MAX_BATCH_BODY_BYTES)
    piece = b" " * (1024 * 1024)
    parts = [b'{"jobs": ['] + [piece] * (cap // len(piece) + 2) + [b"]}"]
    status, body = _post(web, "/api/v1/jobs/batch", key, parts, chunked=chunked)
    assert status == 413
    assert body["error"]["code"] == "too_large"
    assert str(settings.CHIME_API_MAX_BATCH_BODY_BYTES) in body["error"]["message"]
    assert not JobDefinition.objects.filter(tenant=tenant).exists()


def test_nothing_past_the_cap_is_kept(monkeypatch):
    """The handler's read_body keeps at most the cap, however much the client sends."""
    import asyncio

    from apps.core import asgi_handler

    kept = []

    class Recording(tempfile.SpooledTemporaryFile):
        def write(self, data):
            kept.append(len(data))
            return super().write(data)

    monkeypatch.setattr(asgi_handler.tempfile, "SpooledTemporaryFile", Recording)
    cap = asgi_handler.body_cap()
    piece = b"x" * (1024 * 1024)
    messages = [{"type": "http.request", "body": piece, "more_body": True}] * (cap // len(piece) + 5)
    messages.append({"type": "http.request", "body": b"", "more_body": False})
    queue = iter(messages)

    async def receive():
        return next(queue)

    result = asyncio.run(asgi_handler.OneHopASGIHandler().read_body(receive))
    assert isinstance(result, asgi_handler.Oversized)
    assert next(queue, None) is None  # the client's whole body was received (then dropped)
    assert sum(kept) <= cap


def test_a_body_within_the_batch_limit_still_goes_through(web, tenant):
    key = api_key_create(tenant=tenant).raw_key
    data = json.dumps({"jobs": [{**JOB, "name": f"job-{n}"} for n in range(3)]}).encode()
    padded = data[:-1] + b" " * (2 * settings.DATA_UPLOAD_MAX_MEMORY_SIZE) + data[-1:]  # past one request's limit
    status, body = _post(web, "/api/v1/jobs/batch", key, [padded], chunked=True)
    assert status == 201, body
    assert len(body["jobs"]) == 3
