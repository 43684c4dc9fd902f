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
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import aiohttp

from .guard import GuardedResolver, _find_unsafe, describe_error, guard_parsed_url  # noqa: F401 (re-exported)
from .safety import check_url
from .webhook_types import (
    DRAIN_LIMIT_BYTES,
    ERROR_INTERRUPTED,
    ERROR_INVALID_TARGET,
    ERROR_NETWORK,
    ERROR_REFUSED,
    ERROR_TIMEOUT,
    EXCERPT_BYTES,
    WebhookRequest,
    WebhookResponse,
    failed_response,
    parse_retry_after,
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

#: Extra time on top of ``timeout_seconds`` before our own watchdog fires
#: (aiohttp's ClientTimeout(total=...) normally fires first).
_WATCHDOG_SLACK_SECONDS = 2.0
#: How often send_many polls its ``abandon`` callable.
_ABANDON_POLL_SECONDS = 0.25
#: Seconds an idle keep-alive connection is kept in the pool.
KEEPALIVE_SECONDS = 30.0
#: Seconds a (checked) DNS answer is cached by the connector.
DNS_CACHE_SECONDS = 30

#: URLs a transport remembers as checked (apps/delivery/transport.py Transport._checked_url).
_CHECKED_URLS = 10_000


# --------------------------------------------------------------------------
# Background event loop (one per process)
# --------------------------------------------------------------------------


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop where it is installed (requirements/base.in: not on Windows or PyPy), else
    asyncio's. The loop's own work (sockets, transports, callbacks) is a large part of a webhook's
    CPU: raw aiohttp to a local receiver cost ~440 µs of loop-thread CPU per request on asyncio's
    loop and ~280 µs on uvloop's, and Chime's transport ~540 against ~400 µs (bench machine,
    issue #12, docs/benchmarks.md)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - installed with the pinned requirements on Linux
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class _LoopThread:
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = new_event_loop()
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
        self._checked: dict[str, object] = {}  # URL -> its yarl URL, once it passed both checks

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
            results[index] = failed_response(requests[index], error, kind)

    def _runner_thread(self) -> threading.Thread | None:
        runner = self._runner
        return runner.thread if runner is not None else None

    def submit_many(self, requests: list[WebhookRequest]) -> list[concurrent.futures.Future]:
        """Start requests on the transport's loop and return at once; each future ends with its
        WebhookResponse (never an exception, except when cancelled: cancelling a future cancels
        its request). One wake-up of the loop for the lot: waking it per request cost ~0.5 ms
        each. The delivery window (apps/delivery/window.py) keeps many out and records each as
        it ends."""
        loop = self._get_loop()
        futures = [concurrent.futures.Future() for _ in requests]

        def start() -> None:
            for request, future in zip(requests, futures, strict=True):
                if future.cancelled():
                    continue
                task = loop.create_task(self._send(request))
                task.add_done_callback(lambda task, future=future: _resolve(task, future))
                future.add_done_callback(lambda f, task=task: f.cancelled() and loop.call_soon_threadsafe(task.cancel))

        loop.call_soon_threadsafe(start)
        return futures

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
            return failed_response(request, str(exc), ERROR_NETWORK)
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
                error, kind = describe_error(exc, request)
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

    def _checked_url(self, url: str):
        """check_url + guard_parsed_url, remembered per URL for this transport: both are pure
        functions of the URL and allow_private_networks (no DNS: names are checked by the
        resolver at each connection), and cost ~75 µs per request, a third of the transport's
        own CPU per webhook (issue #12). Only URLs that passed are remembered; a refused one is
        checked again, and raises, every time. Loop thread only; bounded."""
        parsed = self._checked.get(url)
        if parsed is None:
            check_url(url, allow_private_networks=self.allow_private_networks)
            parsed = guard_parsed_url(url, self.allow_private_networks)
            if len(self._checked) >= _CHECKED_URLS:
                self._checked.clear()
            self._checked[url] = parsed
        return parsed

    async def _exchange(
        self, session: aiohttp.ClientSession, request: WebhookRequest
    ) -> tuple[int, dict[str, str], str, float | None]:
        url = self._checked_url(request.url)
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


def _resolve(task: asyncio.Task, future: concurrent.futures.Future) -> None:
    """Pass a finished task's result to its thread-safe future (unless that was cancelled)."""
    if not future.set_running_or_notify_cancel():
        return
    if task.cancelled():
        future.set_exception(concurrent.futures.CancelledError())
    elif task.exception() is not None:
        future.set_exception(task.exception())
    else:
        future.set_result(task.result())


class _TransportClosed(RuntimeError):
    pass


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
