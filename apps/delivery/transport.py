"""Concurrent webhook delivery over HTTP for synchronous callers.

Pure Python and libcurl (no Django). Each :class:`Transport` owns one thread per process that
drives a libcurl multi handle (apps/delivery/curl_loop.py): keep-alive connections and the DNS
cache survive across calls (e.g. consecutive Celery tasks), and the HTTP exchange itself runs in C,
the largest single cut of a worker's CPU per webhook (issue #12, docs/benchmarks.md).

SSRF protection without DNS rebinding (apps/delivery/guard.py): every URL is checked before it is
handed over (syntax, IP literals, legacy numeric forms), and every connection's address is checked
by libcurl's open-socket callback right before the socket exists, so the checked address is the
one used; the Host header and TLS SNI keep the original name.
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
from typing import Any

from .curl_loop import WATCHDOG_SLACK_SECONDS, CurlLoop, Exchange
from .guard import Target, describe_error, target_url
from .safety import is_header_name
from .webhook_types import (
    ERROR_INTERRUPTED,
    ERROR_INVALID_TARGET,
    ERROR_NETWORK,
    ERROR_REFUSED,
    ERROR_TIMEOUT,
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
    "Transport",
    "WebhookRequest",
    "WebhookResponse",
    "get_transport",
    "header_lines",
    "parse_retry_after",
]

logger = logging.getLogger(__name__)

#: How often send_many polls its ``abandon`` callable.
_ABANDON_POLL_SECONDS = 0.25
#: URLs a transport remembers as checked (Transport._target).
_CHECKED_URLS = 10_000

# Objects inherited from the parent across fork(): their thread does not exist in this process
# and their sockets are the parent's. Kept referenced, never closed: closing a libcurl handle
# here would shut the parent's (TLS) connections down under it.
_abandoned: list[Any] = []

# Header lines as libcurl sends them: "Name: value", or "Name;" for an empty value, which libcurl
# would otherwise take as "remove this header". A name must be a token (safety.is_header_name,
# remembered per name); a value may hold no CR, LF or NUL (header injection), found by searching
# the joined lines for CR and NUL and counting their LFs. One regular expression over every line
# of every request made this function 54k instructions per run's request against 37k now
# (callgrind, issue #12).


def header_lines(headers: dict[str, str]) -> list:
    """The request's headers as libcurl's CURLOPT_HTTPHEADER list; ValueError if one cannot be sent
    as it is (a line break or a NUL in a value, a name that is not a token). Adds what keeps libcurl
    from inventing headers: no "Expect: 100-continue" wait, and no form Content-Type on a body
    whose caller gave none."""
    lines = [f"{name}: {value}" if value else f"{name};" for name, value in headers.items()]
    text = "\n".join(lines)
    if lines and (
        text.count("\n") != len(lines) - 1 or "\r" in text or "\x00" in text or not all(map(is_header_name, headers))
    ):
        raise ValueError("a header name or value cannot be sent as it is (line break or invalid name)")
    names = {name.lower() for name in headers}
    if "content-type" not in names:
        lines.append("Content-Type:")
    if "expect" not in names:
        lines.append("Expect:")
    if not text.isascii():
        return [line.encode() for line in lines]
    return lines


class Transport:
    """HTTP client for delivering many webhooks concurrently.

    Thread-safe: ``send_many`` and ``submit_many`` may be called from several threads at once.
    libcurl's objects live on the transport's own thread only.
    """

    def __init__(
        self,
        *,
        allow_private_networks: bool,
        max_connections: int = 200,
        user_agent: str = "Chime-Webhooks/1.0",
        max_connections_per_host: int = 0,
        resolve: list[str] | None = None,
    ) -> None:
        """`resolve`: fixed DNS answers, libcurl's CURLOPT_RESOLVE ("host:port:address[,address]"),
        for a deployment whose names resolve differently inside, and for tests; every address is
        still checked at connect time."""
        if max_connections < 1:
            raise ValueError("max_connections must be >= 1")
        self.allow_private_networks = allow_private_networks
        self.max_connections = max_connections
        self.max_connections_per_host = max_connections_per_host
        self.user_agent = user_agent
        self.resolve = list(resolve or [])
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._loop: CurlLoop | None = None
        self._closed = False
        self._targets: dict[str, Target] = {}

    # -- lifecycle ---------------------------------------------------------

    def _get_loop(self) -> CurlLoop:
        with self._lock:
            if self._closed:
                raise RuntimeError("Transport is closed")
            if self._pid != os.getpid():
                _abandoned.append(self._loop)  # forked: the parent's thread and sockets are not ours
                self._loop = None
                self._pid = os.getpid()
            if self._loop is None or self._loop.closed():
                self._loop = CurlLoop(
                    allow_private_networks=self.allow_private_networks,
                    max_connections=self.max_connections,
                    max_connections_per_host=self.max_connections_per_host,
                    user_agent=self.user_agent,
                    resolve=self.resolve,
                )
            return self._loop

    def close(self) -> None:
        """Close the transport and its pooled connections; what is in flight fails. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            loop, self._loop = self._loop, None
        if loop is not None and self._pid == os.getpid():
            loop.close()

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- sending -----------------------------------------------------------

    def _target(self, url: str) -> Target:
        """target_url, remembered per URL for this transport: a pure function of the URL and
        allow_private_networks (no DNS: addresses are checked at each connection), ~75 µs per
        request uncached (issue #12). Only URLs that passed are remembered; a refused one is
        checked again, and raises, every time. Bounded."""
        target = self._targets.get(url)
        if target is None:
            target = target_url(url, allow_private_networks=self.allow_private_networks)
            if len(self._targets) >= _CHECKED_URLS:
                self._targets.clear()
            self._targets[url] = target
        return target

    def submit_many(self, requests: list[WebhookRequest]) -> list[concurrent.futures.Future]:
        """Start requests and return at once; each future ends with its WebhookResponse (never an
        exception; cancelling a future ends its request, its connection closed). One wake-up of
        the transport's thread for the lot. The delivery window (apps/delivery/window.py) keeps
        many out and records each as it ends."""
        loop = self._get_loop()
        futures: list[concurrent.futures.Future] = []
        exchanges = []
        for request in requests:
            try:
                exchange = Exchange(loop, request, self._target(request.url), header_lines(request.headers))
            except Exception as exc:
                error, kind = describe_error(exc, request)
                future: concurrent.futures.Future = concurrent.futures.Future()
                future.set_running_or_notify_cancel()
                future.set_result(failed_response(request, error, kind))
                futures.append(future)
                continue
            futures.append(exchange)
            exchanges.append(exchange)
        if exchanges:
            loop.hand_over(exchanges)
        return futures

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
        """
        if not requests:
            return []
        loop = self._get_loop()
        if threading.current_thread() is loop.thread:
            raise RuntimeError("send_many() called from the transport's own thread")
        futures = {future: index for index, future in enumerate(self.submit_many(requests))}
        results: list[WebhookResponse | None] = [None] * len(requests)
        # Every request is bounded by its own timeout (+ slack) once it has a connection slot;
        # this is a last-resort bound for the whole batch.
        waves = math.ceil(len(requests) / self.max_connections)
        slowest = max(r.timeout_seconds for r in requests)
        deadline = time.monotonic() + waves * (slowest + WATCHDOG_SLACK_SECONDS) + 30
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

    async def send_one(self, request: WebhookRequest) -> WebhookResponse:
        """Send one request from any event loop (the transfer runs on the transport's thread)."""
        return await asyncio.wrap_future(self.submit_many([request])[0])


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
