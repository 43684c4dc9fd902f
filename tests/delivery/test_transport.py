"""Transport against a real aiohttp.web server on 127.0.0.1 (no mocks of the transport)."""

import asyncio
import contextlib
import os
import socket
import ssl
import threading
import time
from collections import namedtuple
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pycurl
import pytest
from aiohttp import web
from standardwebhooks import Webhook

from apps.delivery.guard import ConnectGuard
from apps.delivery.signing import generate_signing_secret, webhook_headers
from apps.delivery.transport import (
    Transport,
    WebhookRequest,
    get_transport,
    header_lines,
    parse_retry_after,
)

# --- test server -------------------------------------------------------------


@dataclass
class Received:
    path: str
    method: str
    headers: dict[str, str]
    raw_headers: list[tuple[bytes, bytes]]
    body: bytes
    client_port: int


@dataclass
class Server:
    port: int
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def url(self, path: str = "/", host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def hits(self, path: str | None = None) -> list[Received]:
        with self.lock:
            return [r for r in self.received if path is None or r.path == path]

    def client_ports(self) -> set[int]:
        with self.lock:
            return {r.client_port for r in self.received}

    def clear(self) -> None:
        with self.lock:
            self.received.clear()


def _make_app(server: Server, stop: asyncio.Event) -> web.Application:
    async def record(request: web.Request) -> web.Request:
        body = await request.read()
        peer = request.transport.get_extra_info("peername") if request.transport else None
        with server.lock:
            server.received.append(
                Received(
                    path=request.path,
                    method=request.method,
                    headers=dict(request.headers),
                    raw_headers=list(request.raw_headers),
                    body=body,
                    client_port=peer[1] if peer else -1,
                )
            )
        return request

    async def ok(request):
        await record(request)
        return web.Response(text="hello webhook")

    async def status(request):
        await record(request)
        return web.Response(status=int(request.match_info["code"]), text="status body")

    async def retry_seconds(request):
        await record(request)
        return web.Response(status=429, headers={"Retry-After": "7"}, text="slow down")

    async def retry_date(request):
        await record(request)
        when = datetime.now(UTC) + timedelta(seconds=120)
        return web.Response(status=429, headers={"Retry-After": format_datetime(when, usegmt=True)})

    async def redirect(request):
        await record(request)
        return web.Response(status=302, headers={"Location": "/target"})

    async def target(request):
        await record(request)
        return web.Response(text="should not be reached")

    async def sleep(request):
        await record(request)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), float(request.query.get("s", "3")))
        return web.Response(text="late")

    async def big(request):
        await record(request)
        return web.Response(body=b"x" * (1024 * 1024), content_type="text/plain")

    async def big_chunked(request):
        await record(request)
        resp = web.StreamResponse()
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        chunk = b"y" * 65536
        for _ in range(16):  # 1 MiB, no Content-Length
            await resp.write(chunk)
        await resp.write_eof()
        return resp

    async def small_tail(request):
        await record(request)
        return web.Response(body="é" * 3000)  # 6000 bytes: excerpt cuts a character

    app = web.Application(client_max_size=10 * 1024 * 1024)
    app.router.add_route("*", "/ok", ok)
    app.router.add_route("*", "/status/{code}", status)
    app.router.add_route("*", "/retry-seconds", retry_seconds)
    app.router.add_route("*", "/retry-date", retry_date)
    app.router.add_route("*", "/redirect", redirect)
    app.router.add_route("*", "/target", target)
    app.router.add_route("*", "/sleep", sleep)
    app.router.add_route("*", "/big", big)
    app.router.add_route("*", "/big-chunked", big_chunked)
    app.router.add_route("*", "/small-tail", small_tail)
    return app


@pytest.fixture(scope="module")
def server():
    loop = asyncio.new_event_loop()
    started = threading.Event()
    holder: dict = {}

    async def start():
        stop = asyncio.Event()
        srv = Server(port=0)
        runner = web.AppRunner(_make_app(srv, stop), shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
        await site.start()
        srv.port = runner.addresses[0][1]
        holder.update(srv=srv, runner=runner, stop=stop)

    def run():
        asyncio.set_event_loop(loop)
        loop.run_until_complete(start())
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True, name="test-webhook-server")
    thread.start()
    assert started.wait(10)
    yield holder["srv"]

    async def stop():
        holder["stop"].set()
        await holder["runner"].cleanup()

    asyncio.run_coroutine_threadsafe(stop(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


@pytest.fixture
def srv(server):
    server.clear()
    return server


@pytest.fixture
def transport():
    t = Transport(allow_private_networks=True)
    yield t
    t.close()


@pytest.fixture
def guarded():
    t = Transport(allow_private_networks=False)
    yield t
    t.close()


def req(url: str, *, key: str = "k", body: bytes = b'{"hello":"world"}', headers=None, timeout=5.0, method="POST"):
    return WebhookRequest(
        key=key,
        url=url,
        method=method,
        headers=headers if headers is not None else {"Content-Type": "application/json"},
        body=body,
        timeout_seconds=timeout,
    )


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- basic outcomes -----------------------------------------------------------


@pytest.mark.timeout(30)
def test_200_with_body(transport, srv):
    [resp] = transport.send_many([req(srv.url("/ok"), key="a")])
    assert resp.key == "a"
    assert resp.status_code == 200
    assert resp.body_excerpt == "hello webhook"
    assert resp.error is None and resp.error_kind is None
    assert resp.retry_after_seconds is None
    assert resp.started_at.tzinfo is not None
    assert resp.started_at <= resp.finished_at
    assert 0 <= resp.duration_ms < 5000
    assert len(srv.hits("/ok")) == 1


@pytest.mark.timeout(30)
def test_500_is_a_response_not_an_error(transport, srv):
    [resp] = transport.send_many([req(srv.url("/status/500"))])
    assert resp.status_code == 500
    assert resp.body_excerpt == "status body"
    assert resp.error is None and resp.error_kind is None


@pytest.mark.timeout(30)
def test_429_retry_after_seconds_and_date(transport, srv):
    seconds, date = transport.send_many([req(srv.url("/retry-seconds")), req(srv.url("/retry-date"))])
    assert seconds.status_code == 429
    assert seconds.retry_after_seconds == 7.0
    assert date.status_code == 429
    assert date.retry_after_seconds is not None
    assert 100 <= date.retry_after_seconds <= 121


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("", None),
        ("0", 0.0),
        ("120", 120.0),
        (" 5 ", 5.0),
        ("-1", None),
        ("1.5", None),
        ("soon", None),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),  # in the past
    ],
)
def test_parse_retry_after(value, expected):
    assert parse_retry_after(value) == expected


def test_parse_retry_after_http_date_relative_to_now():
    now = datetime(2030, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert parse_retry_after("Tue, 01 Jan 2030 12:01:30 GMT", now=now) == 90.0


@pytest.mark.timeout(30)
def test_302_not_followed(transport, srv):
    [resp] = transport.send_many([req(srv.url("/redirect"))])
    assert resp.status_code == 302
    assert resp.error is None
    assert resp.headers.get("Location") == "/target"
    assert len(srv.hits("/redirect")) == 1
    assert srv.hits("/target") == []


@pytest.mark.timeout(30)
def test_timeout(transport, srv):
    [resp] = transport.send_many([req(srv.url("/sleep?s=5"), timeout=0.5)])
    assert resp.status_code is None
    assert resp.error_kind == "timeout"
    assert resp.error == "timed out after 0.5s"
    assert 450 <= resp.duration_ms <= 2000


@pytest.mark.timeout(30)
def test_connection_refused(transport):
    port = closed_port()
    [resp] = transport.send_many([req(f"http://127.0.0.1:{port}/")])
    assert resp.status_code is None
    assert resp.error_kind == "network"
    assert "connection refused" in resp.error
    assert f"127.0.0.1:{port}" in resp.error


@pytest.mark.timeout(30)
def test_dns_failure_is_network(transport):
    [resp] = transport.send_many([req("http://does-not-exist.invalid/")])
    assert resp.error_kind == "network"
    assert "does-not-exist.invalid" in resp.error


@pytest.mark.timeout(30)
@pytest.mark.parametrize("path", ["/big", "/big-chunked"])
def test_large_body_truncated_promptly_and_connection_usable(transport, srv, path):
    t0 = time.monotonic()
    [resp] = transport.send_many([req(srv.url(path))])
    elapsed = time.monotonic() - t0
    assert resp.status_code == 200
    assert resp.error is None
    assert len(resp.body_excerpt) == 4096
    assert set(resp.body_excerpt) == {"x" if path == "/big" else "y"}
    assert elapsed < 3
    # The transport is still healthy afterwards.
    [after] = transport.send_many([req(srv.url("/ok"))])
    assert after.status_code == 200


@pytest.mark.timeout(30)
def test_excerpt_decodes_with_replacement(transport, srv):
    [resp] = transport.send_many([req(srv.url("/small-tail"))])
    assert resp.status_code == 200
    assert resp.body_excerpt == "é" * 2048  # 4096 bytes exactly = 2048 two-byte characters
    [resp2] = transport.send_many([req(srv.url("/small-tail"))])
    assert resp2.status_code == 200


@pytest.mark.timeout(30)
def test_exact_request_bytes_and_headers(srv):
    body = '{"city":"Zürich","emoji":"🚀","n":1}'.encode() + b"\n"
    headers = {
        "Content-Type": "application/json; charset=utf-8",
        "X-Custom": "Value-With-Case",
        "Authorization": "Bearer tenant-token",
    }
    with Transport(allow_private_networks=True, user_agent="Chime-Test/9") as t:
        [resp] = t.send_many([req(srv.url("/ok"), body=body, headers=headers)])
    assert resp.status_code == 200
    [hit] = srv.hits("/ok")
    assert hit.method == "POST"
    assert hit.body == body
    assert hit.headers["Content-Type"] == "application/json; charset=utf-8"
    assert hit.headers["X-Custom"] == "Value-With-Case"
    assert hit.headers["Authorization"] == "Bearer tenant-token"
    assert hit.headers["Content-Length"] == str(len(body))
    assert hit.headers["User-Agent"] == "Chime-Test/9"
    assert hit.headers["Host"] == f"127.0.0.1:{srv.port}"
    assert "Transfer-Encoding" not in hit.headers
    assert "Cookie" not in hit.headers
    names = [name for name, _ in hit.raw_headers]
    assert names.count(b"Content-Type") == 1
    assert b"X-Custom" in names  # case preserved on the wire


@pytest.mark.timeout(30)
def test_no_content_type_invented(transport, srv):
    [resp] = transport.send_many([req(srv.url("/ok"), body=b"raw \x00\xff bytes", headers={})])
    assert resp.status_code == 200
    [hit] = srv.hits("/ok")
    assert hit.body == b"raw \x00\xff bytes"
    assert "Content-Type" not in hit.headers
    assert hit.headers["User-Agent"] == "Chime-Webhooks/1.0"


@pytest.mark.timeout(30)
def test_signed_delivery_verifies_on_receiver(transport, srv):
    secret = generate_signing_secret()
    body = '{"job":"réport","ok":true}'.encode()
    headers = {"Content-Type": "application/json"} | webhook_headers(
        secrets=[secret], msg_id="msg_123", timestamp=datetime.now(UTC), payload=body
    )
    [resp] = transport.send_many([req(srv.url("/ok"), body=body, headers=headers)])
    assert resp.status_code == 200
    [hit] = srv.hits("/ok")
    assert Webhook(secret).verify(hit.body, hit.headers) == {"job": "réport", "ok": True}


@pytest.mark.timeout(30)
def test_results_in_input_order_with_progress(transport, srv):
    port = closed_port()
    requests = [
        req(srv.url("/sleep?s=0.3"), key="slow"),
        req(srv.url("/ok"), key="fast"),
        req(f"http://127.0.0.1:{port}/", key="refused"),
        req("ftp://example.com/", key="invalid"),
    ]
    seen = []
    out = transport.send_many(requests, on_progress=lambda r: seen.append((r.key, threading.current_thread())))
    assert [r.key for r in out] == ["slow", "fast", "refused", "invalid"]
    assert [r.status_code for r in out] == [200, 200, None, None]
    assert out[2].error_kind == "network"
    assert out[3].error_kind == "invalid_target"
    assert sorted(k for k, _ in seen) == sorted(["slow", "fast", "refused", "invalid"])
    assert seen[-1][0] == "slow"  # completion order
    assert all(thread is threading.current_thread() for _, thread in seen)


def test_send_many_empty(transport):
    assert transport.send_many([]) == []


def test_request_validation():
    with pytest.raises(ValueError):
        req("http://example.com/", timeout=0)
    with pytest.raises(TypeError):
        req("http://example.com/", body="not bytes")  # type: ignore[arg-type]


@pytest.mark.timeout(30)
def test_header_injection_is_invalid_target(transport, srv):
    [resp] = transport.send_many([req(srv.url("/ok"), headers={"X-Evil": "a\r\nInjected: 1"})])
    assert resp.status_code is None
    assert resp.error_kind == "invalid_target"
    assert srv.hits() == []


@pytest.mark.timeout(30)
def test_send_one_from_another_event_loop(transport, srv):
    async def main():
        return await asyncio.gather(transport.send_one(req(srv.url("/ok"))), transport.send_one(req(srv.url("/ok"))))

    results = asyncio.run(main())
    assert [r.status_code for r in results] == [200, 200]


# --- concurrency and connection reuse ---------------------------------------------


@pytest.mark.timeout(60)
def test_200_concurrent_requests_then_keepalive_reuse(transport, srv):
    batch1 = [req(srv.url("/sleep?s=0.2"), key=f"a{i}") for i in range(200)]
    t0 = time.monotonic()
    out1 = transport.send_many(batch1)
    elapsed = time.monotonic() - t0
    assert [r.key for r in out1] == [f"a{i}" for i in range(200)]
    assert all(r.status_code == 200 for r in out1), {r.error for r in out1}
    assert elapsed < 10  # concurrent: 200 x 0.2s sequentially would be 40s
    ports_after_1 = srv.client_ports()
    assert len(ports_after_1) <= 200

    out2 = transport.send_many([req(srv.url("/ok"), key=f"b{i}") for i in range(200)])
    assert all(r.status_code == 200 for r in out2)
    new_connections = srv.client_ports() - ports_after_1
    assert len(new_connections) <= 20, f"{len(new_connections)} new connections for the 2nd batch"
    assert len(srv.client_ports()) < 400 * 0.6


@pytest.mark.timeout(60)
def test_sequential_batches_reuse_connections(transport, srv):
    for i in range(20):
        out = transport.send_many([req(srv.url("/ok"), key=f"{i}-{j}") for j in range(5)])
        assert all(r.status_code == 200 for r in out)
    assert len(srv.hits("/ok")) == 100
    assert len(srv.client_ports()) <= 10  # far fewer connections than 100 requests


@pytest.mark.timeout(60)
def test_concurrent_send_many_from_threads(transport, srv):
    results = {}

    def worker(n):
        results[n] = transport.send_many([req(srv.url("/ok"), key=f"{n}-{j}") for j in range(10)])

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(results) == list(range(8))
    for n, out in results.items():
        assert [r.key for r in out] == [f"{n}-{j}" for j in range(10)]
        assert all(r.status_code == 200 for r in out)


# --- SSRF ---------------------------------------------------------------------------


def _refusal_cases(port):
    return [
        (f"http://127.0.0.1:{port}/ok", "127.0.0.1"),
        ("http://10.0.0.1/", "10.0.0.1"),
        ("http://169.254.169.254/latest/meta-data", "169.254.169.254"),
        (f"http://[::1]:{port}/ok", "::1"),
        (f"http://[::ffff:127.0.0.1]:{port}/ok", "127.0.0.1"),
        (f"http://localhost:{port}/ok", "127.0.0.1"),
        (f"http://LOCALHOST:{port}/ok", "127.0.0.1"),
        (f"http://2130706433:{port}/ok", "127.0.0.1"),
        (f"http://0x7f.1:{port}/ok", "127.0.0.1"),
        (f"http://127.1:{port}/ok", "127.0.0.1"),
    ]


@pytest.mark.timeout(30)
def test_private_targets_refused(guarded, srv):
    cases = _refusal_cases(srv.port)
    out = guarded.send_many([req(url, key=url) for url, _ in cases])
    for (url, address), resp in zip(cases, out, strict=True):
        assert resp.key == url
        assert resp.status_code is None, url
        assert resp.error_kind == "refused", (url, resp.error)
        assert resp.error.startswith("refused: "), resp.error
        assert address in resp.error, (url, resp.error)
    assert "localhost" in out[5].error  # names the host and the address
    assert "WEBHOOK_ALLOW_PRIVATE_NETWORKS=true" in out[0].error
    assert srv.hits() == []  # the server received nothing


@pytest.mark.timeout(30)
def test_private_targets_allowed_when_enabled(transport, srv):
    urls = [srv.url("/ok"), srv.url("/ok", host="localhost"), srv.url("/ok", host="LocalHost")]
    out = transport.send_many([req(u, key=u) for u in urls])
    assert [r.status_code for r in out] == [200, 200, 200], [r.error for r in out]
    assert len(srv.hits("/ok")) == 3
    # Host header keeps the original name (the connector connects to the resolved address).
    assert srv.hits("/ok")[1].headers["Host"] == f"localhost:{srv.port}"


@pytest.mark.timeout(30)
def test_numeric_forms_refused_even_when_private_allowed(transport, srv):
    out = transport.send_many([req(f"http://2130706433:{srv.port}/ok"), req(f"http://0x7f.1:{srv.port}/ok")])
    assert [r.error_kind for r in out] == ["refused", "refused"]
    assert srv.hits() == []


@pytest.mark.timeout(30)
def test_invalid_targets(guarded):
    urls = ["ftp://example.com/", "http://user:pw@example.com/", "http://example.com:0/", "not a url"]
    out = guarded.send_many([req(u, key=u) for u in urls])
    assert [r.error_kind for r in out] == ["invalid_target"] * 4
    assert all(r.error.startswith("invalid target: ") for r in out)


@pytest.mark.timeout(30)
def test_a_name_is_checked_where_it_connects_every_time(srv):
    """The address a name resolves to is checked when the connection opens (libcurl's open-socket
    callback), not when the URL is read: a name that resolves to loopback is refused, on every
    request (nothing about a refusal is remembered), and nothing reaches the server."""
    fixed = [f"rebind.example:{srv.port}:127.0.0.1"]  # libcurl's own --resolve: stands in for DNS
    with Transport(allow_private_networks=False, resolve=fixed) as guarded:
        out = guarded.send_many([req(f"http://rebind.example:{srv.port}/ok", key=str(i)) for i in range(2)])
    for resp in out:
        assert resp.status_code is None
        assert resp.error_kind == "refused"
        assert resp.error.startswith("refused: rebind.example resolves to 127.0.0.1, which is a loopback address")
    assert srv.hits() == []
    with Transport(allow_private_networks=True, resolve=fixed) as allowed:  # the same name, allowed
        [resp] = allowed.send_many([req(f"http://rebind.example:{srv.port}/ok")])
    assert resp.status_code == 200
    assert srv.hits("/ok")[0].headers["Host"] == f"rebind.example:{srv.port}"


@pytest.mark.timeout(30)
def test_every_refused_address_of_a_name_is_named(srv):
    fixed = [f"two.example:{srv.port}:127.0.0.2,127.0.0.1"]
    with Transport(allow_private_networks=False, resolve=fixed) as guarded:
        [resp] = guarded.send_many([req(f"http://two.example:{srv.port}/ok")])
    assert resp.error_kind == "refused"
    assert "127.0.0.1" in resp.error and "127.0.0.2" in resp.error
    assert srv.hits() == []


def test_connect_guard_opens_a_socket_only_for_an_allowed_address():
    """Per address, whatever the name: a mixed answer can only ever reach its public addresses."""

    address = namedtuple("curl_sockaddr", "family socktype protocol addr")
    refused = []
    guard = ConnectGuard(allow_private_networks=False, refused=refused)
    fd = guard(0, address(socket.AF_INET, socket.SOCK_STREAM, 0, ("93.184.216.34", 443)))
    assert fd >= 0
    os.close(fd)
    assert guard(0, address(socket.AF_INET, socket.SOCK_STREAM, 0, ("10.1.2.3", 443))) == pycurl.SOCKET_BAD
    assert guard(0, address(socket.AF_INET6, socket.SOCK_STREAM, 0, ("::ffff:192.168.0.1", 443, 0, 0))) == -1
    assert [ip for ip, _ in refused] == ["10.1.2.3", "::ffff:192.168.0.1"]


@pytest.mark.parametrize(
    "headers",
    [
        {"X-Evil": "a\r\nInjected: 1"},
        {"X-Evil": "a\nInjected: 1"},
        {"X-Cr": "a\rb"},
        {"X-Nul": "a\x00b"},
        {"Bad Name": "x"},
        {"Na:me": "x"},
        {"X-Line\nName": "x"},
        {"": "x"},
        {"X-Ok": "fine", "X-Evil": "a\nInjected: 1"},
    ],
)
def test_header_lines_refuse_what_cannot_be_sent_as_is(headers):
    with pytest.raises(ValueError):
        header_lines(headers)


def test_header_lines_keep_empty_values_and_add_no_invented_headers():
    assert header_lines({"X-Empty": "", "Content-Type": "text/plain"}) == [
        "X-Empty;",
        "Content-Type: text/plain",
        "Expect:",
    ]
    assert header_lines({}) == ["Content-Type:", "Expect:"]
    # A name that only begins like one of them does not stand in for it.
    assert header_lines({"Content-Type-Options": "x", "Expectation": "y"}) == [
        "Content-Type-Options: x",
        "Expectation: y",
        "Content-Type:",
        "Expect:",
    ]
    assert header_lines({"X-Name": "Zürich"}) == [b"X-Name: Z\xc3\xbcrich", b"Content-Type:", b"Expect:"]


@pytest.mark.timeout(30)
def test_header_values_arrive_as_sent(transport, srv):
    headers = {"X-Empty": "", "X-Name": "Zürich", "Content-Type": "application/json"}
    [resp] = transport.send_many([req(srv.url("/ok"), headers=headers)])
    assert resp.status_code == 200
    [hit] = srv.hits("/ok")
    raw = dict(hit.raw_headers)
    assert raw[b"X-Empty"] == b""
    assert raw[b"X-Name"] == "Zürich".encode()
    assert b"Expect" not in raw


@pytest.mark.timeout(30)
@pytest.mark.parametrize("method", ["GET", "PUT", "PATCH", "DELETE", "POST", "post"])
def test_each_method_goes_out_with_its_body(transport, srv, method):
    body = b"" if method == "GET" else b'{"m":1}'
    [resp] = transport.send_many([req(srv.url("/ok"), method=method, body=body)])
    assert resp.status_code == 200
    [hit] = srv.hits("/ok")
    assert hit.method == method.upper()
    assert hit.body == body


@pytest.mark.timeout(30)
def test_an_untrusted_certificate_is_refused(tls_server):
    """TLS is verified against the system's trust store: a certificate of an unknown CA fails."""
    with Transport(allow_private_networks=True) as t:
        [resp] = t.send_many([req(f"https://localhost:{tls_server.port}/ok")])
    assert resp.status_code is None
    assert resp.error_kind == "network"
    assert resp.error.startswith("TLS certificate verification failed for localhost")


@pytest.mark.timeout(30)
def test_a_certificate_of_a_trusted_ca_is_accepted(tls_server, monkeypatch):
    """The trust store is the one Python's ssl module uses, SSL_CERT_FILE included (not a path
    compiled into the libcurl that pycurl's wheel carries)."""
    monkeypatch.setenv("SSL_CERT_FILE", str(tls_server.ca_file))
    with Transport(allow_private_networks=True) as t:
        [resp] = t.send_many([req(f"https://localhost:{tls_server.port}/ok")])
    assert (resp.status_code, resp.error) == (200, None)
    assert resp.body_excerpt == "ok"


@dataclass
class TlsServer:
    port: int
    ca_file: object


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    """An HTTPS server on 127.0.0.1 whose certificate for localhost is signed by a CA of its own."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.now(UTC)

    def certificate(subject: str, key, issuer: str, issuer_key, *, ca: bool):
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(days=1))
            .not_valid_after(now + timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        return builder.sign(issuer_key, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = certificate("Chime test CA", ca_key, "Chime test CA", ca_key, ca=True)
    leaf = certificate("localhost", key, "Chime test CA", ca_key, ca=False)
    directory = tmp_path_factory.mktemp("tls")
    (directory / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (directory / "cert.pem").write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    (directory / "key.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(directory / "cert.pem", directory / "key.pem")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    stop = threading.Event()

    def serve():
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with contextlib.suppress(OSError), context.wrap_socket(conn, server_side=True) as tls:
                tls.recv(65536)
                tls.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield TlsServer(port=listener.getsockname()[1], ca_file=directory / "ca.pem")
    stop.set()
    thread.join(5)
    listener.close()


# --- lifecycle ----------------------------------------------------------------------


def test_get_transport_singleton_per_flag():
    a = get_transport(allow_private_networks=False)
    b = get_transport(allow_private_networks=False)
    c = get_transport(allow_private_networks=True)
    assert a is b
    assert a is not c
    assert a.allow_private_networks is False and c.allow_private_networks is True


def test_closed_transport_refuses_use():
    t = Transport(allow_private_networks=True)
    t.close()
    t.close()  # idempotent
    with pytest.raises(RuntimeError):
        t.send_many([req("http://example.com/")])


@pytest.mark.timeout(30)
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_get_transport_recreated_after_fork(srv):
    parent = get_transport(allow_private_networks=True)
    [warm] = parent.send_many([req(srv.url("/ok"))])  # parent loop thread + pool exist
    assert warm.status_code == 200
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 1
        try:
            child = get_transport(allow_private_networks=True)
            [resp] = child.send_many([req(srv.url("/ok"), key="child")])
            ok = child is not parent and resp.status_code == 200
            os.write(write_fd, b"ok" if ok else f"bad {resp.error}".encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_fd)
    status = os.waitpid(pid, 0)[1]
    message = os.read(read_fd, 1000)
    os.close(read_fd)
    assert os.waitstatus_to_exitcode(status) == 0
    assert message == b"ok"
    [after] = parent.send_many([req(srv.url("/ok"))])
    assert after.status_code == 200


@pytest.mark.timeout(30)
def test_close_while_in_flight_does_not_hang(srv):
    t = Transport(allow_private_networks=True)
    result = {}
    worker = threading.Thread(
        target=lambda: result.update(out=t.send_many([req(srv.url("/sleep?s=5"), timeout=10)])), daemon=True
    )
    worker.start()
    deadline = time.monotonic() + 5
    while not srv.hits("/sleep") and time.monotonic() < deadline:
        time.sleep(0.01)
    t.close()
    worker.join(10)
    assert not worker.is_alive()
    [resp] = result["out"]
    assert resp.status_code is None
    assert resp.error_kind == "network"
