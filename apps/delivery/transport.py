"""Concurrent webhook delivery over HTTP for synchronous callers.

Pure Python (no Django). One daemon thread per process runs an asyncio event
loop; each :class:`Transport` owns one long-lived ``aiohttp.ClientSession`` on
that loop, so keep-alive connections and the DNS cache survive across
:meth:`Transport.send_many` calls (e.g. consecutive Celery tasks).

SSRF protection without DNS rebinding: the connector's resolver is a
:class:`GuardedResolver` that refuses the whole lookup if ANY resolved address
is disallowed. aiohttp connects only to the addresses its resolver returned
(or, for a DNS-cache hit, to addresses that resolver returned earlier), so the
checked address is the one used, while the Host header and TLS SNI keep the
original name. aiohttp skips the resolver for IP-literal hosts, so every
request is first checked with :func:`apps.delivery.safety.check_url` plus a
check of the host exactly as yarl/aiohttp parsed it.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import email.utils
import ipaddress
import logging
import math
import os
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import ThreadedResolver
from yarl import URL

from .safety import (
    InvalidTarget,
    UnsafeTarget,
    address_refusal_reason,
    check_url,
    refusal_message,
)

__all__ = [
    "ERROR_INTERRUPTED",
    "ERROR_INVALID_TARGET",
    "ERROR_NETWORK",
    "ERROR_REFUSED",
    "ERROR_TIMEOUT",
    "GuardedResolver",
    "Transport",
    "WebhookRequest",
    "WebhookResponse",
    "get_transport",
    "parse_retry_after",
]

logger = logging.getLogger(__name__)

ERROR_NETWORK = "network"
ERROR_TIMEOUT = "timeout"
ERROR_REFUSED = "refused"
ERROR_INVALID_TARGET = "invalid_target"
#: The request was cancelled in flight because the worker is shutting down.
ERROR_INTERRUPTED = "interrupted"

#: Bytes of response body kept in ``WebhookResponse.body_excerpt``.
EXCERPT_BYTES = 4096
#: After the excerpt, up to this many more body bytes are read so the
#: connection can go back to the keep-alive pool; beyond it the connection is
#: closed instead (a huge body is never downloaded).
DRAIN_LIMIT_BYTES = 64 * 1024
#: Extra time on top of ``timeout_seconds`` before our own watchdog fires
#: (aiohttp's ClientTimeout(total=...) normally fires first).
_WATCHDOG_SLACK_SECONDS = 2.0
#: How often send_many polls its ``abandon`` callable.
_ABANDON_POLL_SECONDS = 0.25
#: Seconds an idle keep-alive connection is kept in the pool.
KEEPALIVE_SECONDS = 30.0
#: Seconds a (checked) DNS answer is cached by the connector.
DNS_CACHE_SECONDS = 30


@dataclass
class WebhookRequest:
    key: str
    url: str
    method: str
    headers: dict[str, str]
    body: bytes
    timeout_seconds: float

    def __post_init__(self) -> None:
        # Programming errors fail loudly here, not as a delivery failure.
        if not isinstance(self.body, bytes):
            raise TypeError("WebhookRequest.body must be bytes")
        timeout = float(self.timeout_seconds)
        if not math.isfinite(timeout) or timeout <= 0:
            # aiohttp treats total=0 as "no timeout"; never allow that.
            raise ValueError("WebhookRequest.timeout_seconds must be > 0")


@dataclass
class WebhookResponse:
    key: str
    started_at: datetime
    finished_at: datetime
    duration_ms: int
    status_code: int | None
    body_excerpt: str
    retry_after_seconds: float | None
    error: str | None
    error_kind: str | None
    headers: dict[str, str] = field(default_factory=dict, repr=False)


# --------------------------------------------------------------------------
# Resolver
# --------------------------------------------------------------------------


class GuardedResolver(AbstractResolver):
    """Resolve with an inner resolver, refuse if any address is disallowed.

    Raises :class:`UnsafeTarget` (deliberately *not* an ``OSError``: aiohttp
    3.14 wraps only ``OSError`` from the resolver in
    ``ClientConnectorDNSError``, so this propagates unwrapped out of
    ``session.request``; :func:`_find_unsafe` also walks ``__cause__`` /
    ``os_error`` in case a future aiohttp wraps it). A refused answer raises
    before aiohttp's DNS cache stores it, so it is never cached.
    """

    def __init__(
        self,
        *,
        allow_private_networks: bool,
        resolver: AbstractResolver | None = None,
    ) -> None:
        self._allow_private_networks = allow_private_networks
        self._resolver = resolver if resolver is not None else ThreadedResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self._resolver.resolve(host, port, family=family)
        if not results:
            raise OSError(f"no addresses found for {host}")
        for result in results:
            address = result["host"]
            reason = address_refusal_reason(address, allow_private_networks=self._allow_private_networks)
            if reason is not None:
                raise UnsafeTarget(
                    refusal_message(
                        address,
                        reason,
                        host=host,
                        allow_private_networks=self._allow_private_networks,
                    ),
                    host=host,
                    address=str(address),
                )
        return results

    async def close(self) -> None:
        await self._resolver.close()


# --------------------------------------------------------------------------
# Background event loop (one per process)
# --------------------------------------------------------------------------


class _LoopThread:
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.call_soon(ready.set)
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, name="chime-webhook-loop", daemon=True)
        self.thread.start()
        ready.wait()

    def alive(self) -> bool:
        return self.pid == os.getpid() and self.thread.is_alive() and not self.loop.is_closed()


_loop_lock = threading.Lock()
_loop_thread: _LoopThread | None = None
# Objects inherited from the parent across fork(): they belong to a loop that
# no longer runs in this process. Kept referenced so their finalizers do not
# complain ("Unclosed client session"); they cannot be closed cleanly.
_abandoned: list[Any] = []


def _get_loop_thread() -> _LoopThread:
    global _loop_thread
    with _loop_lock:
        if _loop_thread is None or not _loop_thread.alive():
            if _loop_thread is not None:
                _abandoned.append(_loop_thread)
            _loop_thread = _LoopThread()
        return _loop_thread


# --------------------------------------------------------------------------
# Transport
# --------------------------------------------------------------------------


class Transport:
    """HTTP client for delivering many webhooks concurrently.

    Thread-safe: ``send_many`` may be called from several threads at once.
    All aiohttp objects live on the background loop thread only.
    """

    def __init__(
        self,
        *,
        allow_private_networks: bool,
        max_connections: int = 200,
        user_agent: str = "Chime-Webhooks/1.0",
        max_connections_per_host: int = 0,
    ) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be >= 1")
        self.allow_private_networks = allow_private_networks
        self.max_connections = max_connections
        self.max_connections_per_host = max_connections_per_host
        self.user_agent = user_agent
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._runner: _LoopThread | None = None
        self._closed = False
        # Loop-thread-only state:
        self._session: aiohttp.ClientSession | None = None
        self._slots: asyncio.Semaphore | None = None

    # -- lifecycle ---------------------------------------------------------

    def _get_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._closed:
                raise RuntimeError("Transport is closed")
            if self._pid != os.getpid():
                # Forked: the parent's loop thread and sockets are not ours.
                _abandoned.append((self._runner, self._session))
                self._runner = None
                self._session = None
                self._slots = None
                self._pid = os.getpid()
            if self._runner is None or not self._runner.alive():
                self._runner = _get_loop_thread()
            return self._runner.loop

    def _session_on_loop(self) -> tuple[aiohttp.ClientSession, asyncio.Semaphore]:
        """Runs on the loop thread only. Creating the session under the lock
        (no await inside) means close() can never miss a session created
        concurrently with it."""
        with self._lock:
            if self._closed:
                raise _TransportClosed("transport is closed")
            if self._session is None or self._session.closed:
                connector = aiohttp.TCPConnector(
                    limit=self.max_connections,
                    limit_per_host=self.max_connections_per_host,
                    resolver=GuardedResolver(allow_private_networks=self.allow_private_networks),
                    use_dns_cache=True,
                    ttl_dns_cache=DNS_CACHE_SECONDS,
                    keepalive_timeout=KEEPALIVE_SECONDS,
                )
                self._session = aiohttp.ClientSession(
                    connector=connector,
                    trust_env=False,  # never route via HTTP(S)_PROXY / .netrc
                    cookie_jar=aiohttp.DummyCookieJar(),  # no cookies across tenants
                    headers={"User-Agent": self.user_agent},
                    raise_for_status=False,
                )
                # Our own slot limit (== connector limit) so time spent queueing
                # for a free connection does not eat into a request's timeout.
                self._slots = asyncio.Semaphore(self.max_connections)
            assert self._slots is not None
            return self._session, self._slots

    def close(self) -> None:
        """Close the session and its pooled connections. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            runner, session = self._runner, self._session
            self._session = None
            self._slots = None
        if runner is None or session is None or self._pid != os.getpid() or not runner.alive():
            return
        future = asyncio.run_coroutine_threadsafe(session.close(), runner.loop)
        try:
            future.result(timeout=5)
        except Exception:  # pragma: no cover - best effort
            logger.warning("error closing webhook transport", exc_info=True)

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- sending -----------------------------------------------------------

    def send_many(
        self,
        requests: list[WebhookRequest],
        *,
        on_progress: Callable[[WebhookResponse], None] | None = None,
        abandon: Callable[[], bool] | None = None,
    ) -> list[WebhookResponse]:
        """Send all requests concurrently; block until all are done.

        Returns responses in input order. A failing request yields a response
        with ``error``/``error_kind`` set; this never raises for one.
        ``on_progress(response)`` is called in the calling thread as each
        request finishes (in completion order); an exception it raises
        propagates (requests still in flight keep running to completion).
        ``abandon()``, polled while requests are out, returning True cancels
        the ones still in flight: they come back with ``ERROR_INTERRUPTED``
        (a worker shutting down hands them back instead of being killed).
        Must not be called from the transport's own loop thread.
        """
        if not requests:
            return []
        loop = self._get_loop()
        if threading.current_thread() is self._runner_thread():
            raise RuntimeError("send_many() called from the transport loop thread")
        futures = {asyncio.run_coroutine_threadsafe(self._send(req), loop): index for index, req in enumerate(requests)}
        results: list[WebhookResponse | None] = [None] * len(requests)
        # Every request is bounded by its own timeout (+ slack) once it has a
        # connection slot; this is a last-resort bound for the whole batch.
        waves = math.ceil(len(requests) / self.max_connections)
        slowest = max(r.timeout_seconds for r in requests)
        deadline = time.monotonic() + waves * (slowest + _WATCHDOG_SLACK_SECONDS) + 30
        pending = set(futures)
        while pending:
            if abandon is not None and abandon():
                why = "interrupted: the worker shut down"
                self._give_up(pending, futures, requests, results, why, ERROR_INTERRUPTED)
                break
            left = deadline - time.monotonic()
            if left <= 0:
                logger.error("webhook batch exceeded its deadline; abandoning %d requests", len(pending))
                self._give_up(pending, futures, requests, results, "gave up waiting for the batch", ERROR_TIMEOUT)
                break
            done, pending = concurrent.futures.wait(
                pending,
                timeout=min(left, _ABANDON_POLL_SECONDS) if abandon is not None else left,
                return_when=concurrent.futures.FIRST_COMPLETED,
            )
            for future in done:
                response = future.result()
                results[futures[future]] = response
                if on_progress is not None:
                    on_progress(response)
        return [r for r in results if r is not None]

    @staticmethod
    def _give_up(pending, futures, requests, results, error: str, kind: str) -> None:
        for future in pending:
            index = futures[future]
            future.cancel()
            results[index] = _failed(requests[index], error, kind)

    def _runner_thread(self) -> threading.Thread | None:
        runner = self._runner
        return runner.thread if runner is not None else None

    async def send_one(self, request: WebhookRequest) -> WebhookResponse:
        """Send one request. May be awaited from any event loop: when that is
        not the transport's loop, the work is handed over to it."""
        loop = self._get_loop()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:  # pragma: no cover - only callable from a loop
            running = None
        if running is loop:
            return await self._send(request)
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._send(request), loop))

    async def _send(self, request: WebhookRequest) -> WebhookResponse:
        """Runs on the transport loop. Never raises (except cancellation)."""
        try:
            session, slots = self._session_on_loop()
        except _TransportClosed as exc:
            return _failed(request, str(exc), ERROR_NETWORK)
        async with slots:
            started_at = datetime.now(UTC)
            t0 = time.monotonic()
            status: int | None = None
            excerpt = ""
            retry_after: float | None = None
            headers: dict[str, str] = {}
            error: str | None = None
            kind: str | None = None
            try:
                status, headers, excerpt, retry_after = await self._exchange(session, request)
            except Exception as exc:
                error, kind = _describe_error(exc, request)
            finished_at = datetime.now(UTC)
            return WebhookResponse(
                key=request.key,
                started_at=started_at,
                finished_at=finished_at,
                duration_ms=round((time.monotonic() - t0) * 1000),
                status_code=status,
                body_excerpt=excerpt,
                retry_after_seconds=retry_after,
                error=error,
                error_kind=kind,
                headers=headers,
            )

    async def _exchange(
        self, session: aiohttp.ClientSession, request: WebhookRequest
    ) -> tuple[int, dict[str, str], str, float | None]:
        check_url(request.url, allow_private_networks=self.allow_private_networks)
        url = _guard_parsed_url(request.url, self.allow_private_networks)
        timeout = float(request.timeout_seconds)
        async with asyncio.timeout(timeout + _WATCHDOG_SLACK_SECONDS):
            async with session.request(
                request.method.upper(),
                url,
                data=request.body,
                headers=request.headers,
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=timeout),
                # No invented Content-Type: only what the caller passed.
                skip_auto_headers=("Content-Type",),
            ) as resp:
                status = resp.status
                resp_headers = {k: v for k, v in resp.headers.items()}
                retry_after = parse_retry_after(resp.headers.get("Retry-After"))
                # Once a status line arrived, the outcome is that status; a
                # failure while reading the body only shortens the excerpt.
                body = await _read_excerpt(resp)
        return status, resp_headers, body.decode("utf-8", errors="replace"), retry_after


class _TransportClosed(RuntimeError):
    pass


def _failed(request: WebhookRequest, error: str, kind: str) -> WebhookResponse:
    now = datetime.now(UTC)
    return WebhookResponse(
        key=request.key,
        started_at=now,
        finished_at=now,
        duration_ms=0,
        status_code=None,
        body_excerpt="",
        retry_after_seconds=None,
        error=error,
        error_kind=kind,
    )


async def _read_excerpt(resp: aiohttp.ClientResponse) -> bytes:
    """First EXCERPT_BYTES of the body; leave the connection reusable when the
    rest is small, otherwise close it."""
    buf = bytearray()
    try:
        while len(buf) < EXCERPT_BYTES:
            chunk = await resp.content.read(EXCERPT_BYTES - len(buf))
            if not chunk:
                return bytes(buf)  # EOF: released to the pool on exit
            buf += chunk
        # More may follow; drain a bounded amount so keep-alive survives.
        if resp.content_length is not None and resp.content_length > (EXCERPT_BYTES + DRAIN_LIMIT_BYTES):
            resp.close()
            return bytes(buf)
        drained = 0
        while drained <= DRAIN_LIMIT_BYTES:
            chunk = await resp.content.read(16 * 1024)
            if not chunk:
                return bytes(buf)
            drained += len(chunk)
        resp.close()  # too big: drop the connection instead of reading it all
    except (aiohttp.ClientError, OSError, TimeoutError):
        resp.close()
    return bytes(buf)


def _guard_parsed_url(url: str, allow_private_networks: bool) -> URL:
    """Re-check the host exactly as yarl (and therefore aiohttp) parses it:
    aiohttp bypasses the resolver when the host looks like an IP address
    (contains ':' or only digits and dots)."""
    try:
        parsed = URL(url)
    except (ValueError, TypeError) as exc:
        raise InvalidTarget(f"invalid URL: {exc}") from exc
    if parsed.scheme not in ("http", "https") or not parsed.raw_host:
        raise InvalidTarget("invalid URL")
    if parsed.user is not None or parsed.password is not None:
        raise InvalidTarget("credentials in the URL are not allowed")
    host = parsed.raw_host
    if ":" in host or host.replace(".", "").isdigit():
        try:
            addr = ipaddress.ip_address(host.split("%", 1)[0])
        except ValueError as exc:
            raise UnsafeTarget(f"{host} is not a standard IP address", host=host, address=host) from exc
        reason = address_refusal_reason(addr, allow_private_networks=allow_private_networks)
        if reason is not None:
            raise UnsafeTarget(
                refusal_message(addr, reason, allow_private_networks=allow_private_networks),
                host=host,
                address=str(addr),
            )
    return parsed


# --------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------


def _find_unsafe(exc: BaseException) -> UnsafeTarget | None:
    """Find our refusal inside aiohttp's wrapping (``os_error``,
    ``__cause__``, ``__context__``)."""
    seen: set[int] = set()
    stack: list[BaseException | None] = [exc]
    while stack:
        current = stack.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, UnsafeTarget):
            return current
        os_error = getattr(current, "os_error", None)
        if isinstance(os_error, BaseException):
            stack.append(os_error)
        stack.append(current.__cause__)
        stack.append(current.__context__)
    return None


def _fmt_seconds(seconds: float) -> str:
    return f"{seconds:g}s"


def _describe_error(exc: Exception, request: WebhookRequest) -> tuple[str, str]:
    """(human message, error_kind) for a failed request."""
    unsafe = _find_unsafe(exc)
    if unsafe is not None:
        return f"refused: {unsafe}", ERROR_REFUSED
    if isinstance(exc, InvalidTarget):
        return f"invalid target: {exc}", ERROR_INVALID_TARGET
    if isinstance(exc, aiohttp.InvalidURL):
        return f"invalid target: invalid URL {exc}", ERROR_INVALID_TARGET
    # Timeouts before connection errors: ConnectionTimeoutError is both.
    if isinstance(exc, TimeoutError):  # == asyncio.TimeoutError on 3.11
        return f"timed out after {_fmt_seconds(request.timeout_seconds)}", ERROR_TIMEOUT
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return (
            f"TLS certificate verification failed for {exc.host}: {exc.certificate_error}",
            ERROR_NETWORK,
        )
    if isinstance(exc, aiohttp.ClientConnectorSSLError | aiohttp.ClientSSLError):
        return f"TLS error: {exc}", ERROR_NETWORK
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return (
            f"DNS lookup failed for {exc.host}: {_os_error_text(exc.os_error)}",
            ERROR_NETWORK,
        )
    if isinstance(exc, aiohttp.ClientConnectorError):
        os_error = exc.os_error
        where = f"{exc.host}:{exc.port}"
        if isinstance(os_error, ConnectionRefusedError):
            return f"connection refused by {where}", ERROR_NETWORK
        if isinstance(os_error, TimeoutError):
            return f"connection to {where} timed out", ERROR_TIMEOUT
        return f"could not connect to {where}: {_os_error_text(os_error)}", ERROR_NETWORK
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "server closed the connection without a complete response", ERROR_NETWORK
    if isinstance(exc, aiohttp.ClientResponseError):
        return f"invalid HTTP response: {exc.message}", ERROR_NETWORK
    if isinstance(exc, aiohttp.ClientError | OSError):
        return f"network error: {exc or type(exc).__name__}", ERROR_NETWORK
    if isinstance(exc, ValueError):
        # e.g. CR/LF in a header value: a configuration problem, not retryable.
        return f"invalid request: {exc}", ERROR_INVALID_TARGET
    logger.exception("unexpected error delivering webhook %s", request.key)
    return f"unexpected error: {type(exc).__name__}: {exc}", ERROR_NETWORK


def _os_error_text(error: OSError) -> str:
    text = error.strerror or str(error) or type(error).__name__
    return text


# --------------------------------------------------------------------------
# Retry-After
# --------------------------------------------------------------------------

_DELTA_SECONDS = re.compile(r"[0-9]+", re.ASCII)


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from a Retry-After value (delta-seconds or HTTP-date);
    ``None`` if absent or unparseable. Dates in the past give 0.0."""
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    if _DELTA_SECONDS.fullmatch(text):
        return float(int(text))
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:  # pragma: no cover - older Pythons
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    current = now if now is not None else datetime.now(UTC)
    return max(0.0, (when - current).total_seconds())


# --------------------------------------------------------------------------
# Process-wide singletons
# --------------------------------------------------------------------------

_transports_lock = threading.Lock()
_transports: dict[bool, Transport] = {}
_transports_pid = os.getpid()


def get_transport(*, allow_private_networks: bool) -> Transport:
    """The process-wide Transport for this flag (recreated after fork)."""
    global _transports_pid
    key = bool(allow_private_networks)
    with _transports_lock:
        if _transports_pid != os.getpid():
            _abandoned.extend(_transports.values())
            _transports.clear()
            _transports_pid = os.getpid()
        transport = _transports.get(key)
        if transport is None or transport._closed:
            transport = Transport(allow_private_networks=key)
            _transports[key] = transport
        return transport


@atexit.register
def _close_transports() -> None:  # pragma: no cover - interpreter exit
    with _transports_lock:
        if _transports_pid != os.getpid():
            return
        transports = list(_transports.values())
        _transports.clear()
    for transport in transports:
        try:
            transport.close()
        except Exception:
            logger.debug("error closing webhook transport at exit", exc_info=True)
