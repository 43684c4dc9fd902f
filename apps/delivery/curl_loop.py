"""The webhook loop: one thread per Transport, driving libcurl's multi interface (pycurl).

Why libcurl rather than aiohttp: the HTTP exchange itself runs in C. The aiohttp transport on
uvloop spent ~110 µs of its loop thread's CPU per webhook against a local receiver, raw aiohttp
~75 µs of it; libcurl's multi interface ~17 µs (bench/transport_loop.py, docs/benchmarks.md). At a
spike that was the largest single part of a worker's CPU per run (issue #12).

How it runs:
- requests are handed over through a deque and the thread woken through a socketpair, once per
  hand-over (a batch), not per request;
- at most `max_connections` transfers are inside libcurl at once; the rest wait here, their
  timeout not yet running (time spent waiting for a slot does not eat a request's timeout);
- the thread waits on a selector holding the sockets libcurl asks it to watch
  (CURLMOPT_SOCKETFUNCTION) and libcurl's timer (CURLMOPT_TIMERFUNCTION): the socket_action
  interface, so an event costs one call into libcurl, not a walk of every transfer;
- an easy handle keeps the options that never change and is reused; its connection goes back to
  the multi handle's pool (keep-alive), which outlives every request;
- a transfer that libcurl somehow never ends is ended here at its timeout plus a slack
  (`_expire`): a window slot never leaks.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import logging
import selectors
import socket
import ssl
import threading
import time
from datetime import UTC, datetime

import pycurl

from .guard import ConnectGuard, Target, describe_failure, refusal_text, timeout_message
from .webhook_types import (
    DRAIN_LIMIT_BYTES,
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

logger = logging.getLogger(__name__)

#: Extra time on top of a request's timeout before the loop ends a transfer itself.
WATCHDOG_SLACK_SECONDS = 2.0
#: Seconds an idle keep-alive connection is kept in the pool.
KEEPALIVE_SECONDS = 30
#: Seconds libcurl keeps a DNS answer (every connection's address is checked anyway).
DNS_CACHE_SECONDS = 30
_HOUSEKEEPING_SECONDS = 1.0
CLOSED = "the webhook transport was closed"

_SELECT_TO_CURL = {
    selectors.EVENT_READ: pycurl.CSELECT_IN,
    selectors.EVENT_WRITE: pycurl.CSELECT_OUT,
    selectors.EVENT_READ | selectors.EVENT_WRITE: pycurl.CSELECT_IN | pycurl.CSELECT_OUT,
}
_CURL_TO_SELECT = {
    pycurl.POLL_IN: selectors.EVENT_READ,
    pycurl.POLL_OUT: selectors.EVENT_WRITE,
    pycurl.POLL_INOUT: selectors.EVENT_READ | selectors.EVENT_WRITE,
}


def _ca_options() -> tuple[int, str] | None:
    """The trust store Python's ssl module uses (SSL_CERT_FILE / SSL_CERT_DIR honoured): libcurl's
    compiled-in default path belongs to the system its wheel was built on, not to this one."""
    paths = ssl.get_default_verify_paths()
    if paths.cafile:
        return pycurl.CAINFO, paths.cafile
    if paths.capath:
        return pycurl.CAPATH, paths.capath
    try:
        import certifi
    except ImportError:  # pragma: no cover - certifi is in the lock
        return None
    return pycurl.CAINFO, certifi.where()


class Exchange(concurrent.futures.Future):
    """One request on its way, and the future its caller holds: it ends with the
    WebhookResponse. Cancelling it takes the request out of libcurl (its connection closed).
    One object per request, with no done-callback of its own, so nothing here forms a reference
    cycle that only the garbage collector would free; once it ends, the loop holds none of it."""

    def __init__(self, loop: CurlLoop, request: WebhookRequest, target: Target, lines: list) -> None:
        super().__init__()
        self.loop = loop
        self.request = request
        self.target = target
        self.lines = lines
        self.easy: Easy | None = None  # while libcurl has it
        self.started_at: datetime | None = None
        self.t0 = 0.0

    def cancel(self) -> bool:
        cancelled = super().cancel()
        if cancelled:
            self.loop.cancel(self)
        return cancelled


class Easy:
    """A reusable libcurl easy handle, its options that never change, and what libcurl writes into
    it for the request it carries. Its callbacks are bound once, to this object: a request sets
    only what is its own, and nothing of a finished request stays behind."""

    __slots__ = ("curl", "cut", "excerpt", "excess", "exchange", "head", "refused")

    def __init__(self, curl) -> None:
        self.curl = curl
        self.exchange: Exchange | None = None
        self.head: list[bytes] = []  # the response's header lines, as libcurl hands them over
        self.excerpt = bytearray()
        self.excess = 0
        self.cut = False  # the body was cut short on purpose: the response stands
        self.refused: list[tuple[str, str]] = []  # (address, reason) the connect guard refused
        curl.setopt(pycurl.WRITEFUNCTION, self.write)
        curl.setopt(pycurl.HEADERFUNCTION, self.head.append)

    def reset(self) -> None:
        self.exchange = None
        self.head.clear()
        del self.excerpt[:]
        self.excess = 0
        self.cut = False
        self.refused.clear()

    def write(self, chunk: bytes):
        """CURLOPT_WRITEFUNCTION: keep the first EXCERPT_BYTES; read a bounded amount more so the
        connection can be reused, and stop (a write error libcurl reports, the response standing)
        once a body is too big for that."""
        room = EXCERPT_BYTES - len(self.excerpt)
        if room >= len(chunk):
            self.excerpt += chunk
            return None
        if room > 0:
            self.excerpt += chunk[:room]
            if _content_length(self.head) > EXCERPT_BYTES + DRAIN_LIMIT_BYTES:
                self.cut = True
                return 0
        self.excess += len(chunk) - max(room, 0)
        if self.excess > DRAIN_LIMIT_BYTES:
            self.cut = True
            return 0
        return None


def _content_length(head: list[bytes]) -> int:
    for line in reversed(head):
        if line[:15].lower() == b"content-length:":
            try:
                return int(line[15:])
            except ValueError:
                return -1
        if line.startswith(b"HTTP/"):
            break
    return -1


def _response_headers(head: list[bytes]) -> tuple[dict[str, str], bool]:
    """The last header block's headers (after any interim 1xx), and whether it was complete."""
    start = 0
    for index, line in enumerate(head):
        if line.startswith(b"HTTP/"):
            start = index + 1
    headers: dict[str, str] = {}
    complete = False
    for line in head[start:]:
        name, sep, value = line.partition(b":")
        if sep:
            headers[name.decode("latin-1").strip()] = value.strip().decode("utf-8", "replace")
        elif not line.strip():
            complete = True
    return headers, complete


def _retry_after(headers: dict[str, str]) -> float | None:
    for name, value in headers.items():
        if name.lower() == "retry-after":
            return parse_retry_after(value)
    return None


class CurlLoop:
    """The thread and the libcurl multi handle of one Transport in one process."""

    def __init__(
        self,
        *,
        allow_private_networks: bool,
        max_connections: int,
        max_connections_per_host: int,
        user_agent: str,
        resolve: list[str] | None = None,
    ) -> None:
        self.allow_private = allow_private_networks
        self.max_connections = max_connections
        self.user_agent = user_agent
        self.resolve = list(resolve or [])
        self.ca = _ca_options()
        self.multi = pycurl.CurlMulti()
        self.multi.setopt(pycurl.M_SOCKETFUNCTION, self._on_socket)
        self.multi.setopt(pycurl.M_TIMERFUNCTION, self._on_timer)
        self.multi.setopt(pycurl.M_MAX_TOTAL_CONNECTIONS, max_connections)
        self.multi.setopt(pycurl.M_MAXCONNECTS, max_connections)
        if max_connections_per_host:
            self.multi.setopt(pycurl.M_MAX_HOST_CONNECTIONS, max_connections_per_host)
        self.selector = selectors.DefaultSelector()
        self._watched: dict[int, int] = {}  # fd -> selector events
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self.selector.register(self._wake_r, selectors.EVENT_READ)
        self._inbox: collections.deque = collections.deque()  # exchanges handed over
        self._cancels: collections.deque = collections.deque()  # exchanges whose future was cancelled
        self._waiting: collections.deque = collections.deque()  # for a slot
        self._active: dict = {}  # pycurl.Curl -> its Easy, while libcurl has it
        self._free: list[Easy] = []
        self._timer: float | None = None  # libcurl's timer, as a time.monotonic() deadline
        self._housekeeping = time.monotonic() + _HOUSEKEEPING_SECONDS
        self._closing = False
        self._closed = threading.Event()
        self.thread = threading.Thread(target=self._run, name="chime-webhook-loop", daemon=True)
        self.thread.start()

    # -- from any thread ------------------------------------------------------------------------

    def hand_over(self, exchanges: list[Exchange]) -> None:
        self._inbox.extend(exchanges)
        self._wake()
        if self._closed.is_set():  # shut down meanwhile: the loop may not take them any more
            while self._inbox:
                try:
                    exchange = self._inbox.popleft()
                except IndexError:  # the loop's shutdown took it
                    break
                self._resolve(exchange, failed_response(exchange.request, CLOSED, ERROR_NETWORK))

    def cancel(self, exchange: Exchange) -> None:
        self._cancels.append(exchange)
        self._wake()

    def closed(self) -> bool:
        return self._closed.is_set()

    def close(self, timeout: float = 5) -> None:
        self._closing = True
        self._wake()
        if threading.current_thread() is not self.thread:
            self.thread.join(timeout)

    def _wake(self) -> None:
        # A full buffer means the loop is being woken already (or is gone).
        with contextlib.suppress(BlockingIOError, OSError):
            self._wake_w.send(b"\0")

    # -- libcurl's callbacks (on the loop thread) -----------------------------------------------

    def _on_socket(self, what: int, fd: int, multi, data) -> None:
        try:
            if what == pycurl.POLL_REMOVE:
                if self._watched.pop(fd, None) is not None:
                    self.selector.unregister(fd)
                return
            events = _CURL_TO_SELECT[what]
            known = self._watched.get(fd)
            if known == events:
                return
            if known is None:
                self.selector.register(fd, events)
            else:
                self.selector.modify(fd, events)
            self._watched[fd] = events
        except (KeyError, ValueError, OSError):
            # A descriptor libcurl closed and reused before telling us: watch it afresh.
            self._watched.pop(fd, None)
            with contextlib.suppress(KeyError, ValueError, OSError):
                self.selector.unregister(fd)
            if what != pycurl.POLL_REMOVE:
                self.selector.register(fd, _CURL_TO_SELECT[what])
                self._watched[fd] = _CURL_TO_SELECT[what]

    def _on_timer(self, timeout_ms: int) -> None:
        self._timer = None if timeout_ms < 0 else time.monotonic() + timeout_ms / 1000

    # -- the loop -------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._closing:
                self._turn()
        except Exception:  # pragma: no cover - a bug here must not leave callers waiting forever
            logger.exception("webhook loop failed; failing what it held")
        finally:
            self._shutdown()

    def _turn(self) -> None:
        if self._inbox or self._cancels:
            timeout = 0.0
        else:
            now = time.monotonic()
            timeout = _HOUSEKEEPING_SECONDS if self._timer is None else max(0.0, self._timer - now)
            timeout = min(timeout, max(0.0, self._housekeeping - now))
        for key, mask in self.selector.select(timeout):
            if key.fileobj is self._wake_r:
                try:
                    while self._wake_r.recv(4096):
                        pass
                except (BlockingIOError, OSError):
                    pass
                continue
            self._action(key.fd, _SELECT_TO_CURL[mask & (selectors.EVENT_READ | selectors.EVENT_WRITE)])
        if self._closing:
            return
        while self._cancels:
            self._cancel(self._cancels.popleft())
        while self._inbox:
            self._waiting.append(self._inbox.popleft())
        self._start_waiting()
        now = time.monotonic()
        if self._timer is not None and now >= self._timer:
            self._timer = None
            self._action(pycurl.SOCKET_TIMEOUT, 0)
        self._collect()
        if now >= self._housekeeping:
            self._housekeeping = now + _HOUSEKEEPING_SECONDS
            self._expire(now)

    def _action(self, fd: int, mask: int) -> None:
        try:
            self.multi.socket_action(fd, mask)
        except pycurl.error:
            logger.exception("webhook loop: libcurl socket_action failed")

    def _start_waiting(self) -> None:
        while self._waiting and len(self._active) < self.max_connections:
            exchange = self._waiting.popleft()
            if exchange.cancelled():
                continue
            easy = self._free.pop() if self._free else self._new_easy()
            try:
                self._prepare(easy.curl, exchange.request, exchange)
                exchange.started_at = datetime.now(UTC)
                exchange.t0 = time.monotonic()
                self.multi.add_handle(easy.curl)
            except Exception as exc:  # e.g. a header libcurl refuses: this request fails, not the loop
                self._free.append(easy)
                why = f"invalid request: {exc}"
                self._resolve(exchange, failed_response(exchange.request, why, ERROR_INVALID_TARGET))
                continue
            easy.exchange = exchange
            exchange.easy = easy
            self._active[easy.curl] = easy

    def _new_easy(self) -> Easy:
        """An easy handle with the options every request shares."""
        curl = pycurl.Curl()
        easy = Easy(curl)
        curl.setopt(
            pycurl.OPENSOCKETFUNCTION, ConnectGuard(allow_private_networks=self.allow_private, refused=easy.refused)
        )
        curl.setopt(pycurl.NOSIGNAL, 1)
        curl.setopt(pycurl.PROXY, "")  # never a proxy from the environment (HTTP(S)_PROXY)
        curl.setopt(pycurl.PROTOCOLS, pycurl.PROTO_HTTP | pycurl.PROTO_HTTPS)
        curl.setopt(pycurl.FOLLOWLOCATION, 0)
        curl.setopt(pycurl.HTTP_VERSION, pycurl.CURL_HTTP_VERSION_1_1)
        curl.setopt(pycurl.USERAGENT, self.user_agent)
        curl.setopt(pycurl.DNS_CACHE_TIMEOUT, DNS_CACHE_SECONDS)
        curl.setopt(pycurl.MAXAGE_CONN, KEEPALIVE_SECONDS)
        if self.ca is not None:
            curl.setopt(*self.ca)
        if self.resolve:
            curl.setopt(pycurl.RESOLVE, self.resolve)
        return easy

    @staticmethod
    def _prepare(curl, request: WebhookRequest, exchange: Exchange) -> None:
        curl.setopt(pycurl.URL, exchange.target.url)
        curl.setopt(pycurl.HTTPHEADER, exchange.lines)
        method = request.method.upper()
        if method == "GET":
            curl.setopt(pycurl.HTTPGET, 1)
        else:
            curl.setopt(pycurl.POSTFIELDS, request.body)
        curl.setopt(pycurl.CUSTOMREQUEST, method)
        curl.setopt(pycurl.TIMEOUT_MS, max(1, round(float(request.timeout_seconds) * 1000)))

    def _collect(self) -> None:
        while True:
            queued, succeeded, failed = self.multi.info_read()
            for curl in succeeded:
                self._finish(curl, 0, "")
            for curl, code, message in failed:
                self._finish(curl, code, message)
            if not queued:
                break
        self._start_waiting()

    def _finish(self, curl, code: int, message: str) -> None:
        easy = self._active.get(curl)
        if easy is None:
            self.multi.remove_handle(curl)
            return
        exchange = easy.exchange
        try:
            response = self._response(easy, exchange, code, message)
        finally:
            self._release(easy)
        self._resolve(exchange, response)

    def _release(self, easy: Easy) -> None:
        """Out of libcurl and back to the free handles, nothing of its request kept."""
        del self._active[easy.curl]
        self.multi.remove_handle(easy.curl)
        easy.exchange.easy = None
        easy.reset()
        self._free.append(easy)

    def _response(self, easy: Easy, exchange: Exchange, code: int, message: str) -> WebhookResponse:
        request = exchange.request
        headers, complete = _response_headers(easy.head)
        status = easy.curl.getinfo(pycurl.RESPONSE_CODE) if complete else 0
        error = kind = None
        if not status:
            # Once a complete header block arrived the outcome is its status; a failure while
            # reading the body only shortens the excerpt.
            status = None
            if easy.refused:
                text = refusal_text(exchange.target.host, easy.refused, allow_private_networks=self.allow_private)
                error, kind = f"refused: {text}", ERROR_REFUSED
            else:
                os_errno = easy.curl.getinfo(pycurl.OS_ERRNO) if code == pycurl.E_COULDNT_CONNECT else 0
                error, kind = describe_failure(code, message, exchange=exchange, os_errno=os_errno)
        return WebhookResponse(
            key=request.key,
            started_at=exchange.started_at,
            finished_at=datetime.now(UTC),
            duration_ms=round((time.monotonic() - exchange.t0) * 1000),
            status_code=status,
            body_excerpt=easy.excerpt.decode("utf-8", errors="replace"),
            retry_after_seconds=_retry_after(headers) if status else None,
            error=error,
            error_kind=kind,
            headers=headers if status else {},
        )

    @staticmethod
    def _resolve(exchange: Exchange, response: WebhookResponse) -> None:
        if exchange.set_running_or_notify_cancel():
            exchange.set_result(response)

    def _end(self, exchange: Exchange, response: WebhookResponse | None) -> None:
        """Take an exchange out of libcurl (its connection is closed, not reused)."""
        easy = exchange.easy
        if easy is not None and self._active.get(easy.curl) is easy:
            self._release(easy)
        if response is not None:
            self._resolve(exchange, response)

    def _cancel(self, exchange: Exchange) -> None:
        self._end(exchange, None)  # the future is cancelled already: its owner knows
        self._start_waiting()

    def _expire(self, now: float) -> None:
        for easy in list(self._active.values()):
            exchange = easy.exchange
            limit = float(exchange.request.timeout_seconds) + WATCHDOG_SLACK_SECONDS
            if now - exchange.t0 > limit:
                logger.error("webhook %s: libcurl did not end it in time; ending it", exchange.request.key)
                self._end(exchange, failed_response(exchange.request, timeout_message(exchange.request), ERROR_TIMEOUT))
        self._start_waiting()

    def _shutdown(self) -> None:
        """Fail what is still here (the transport was closed), then free libcurl's resources.
        `_closed` is set first: a hand-over from now on fails its exchanges itself (hand_over)."""
        self._closed.set()
        for easy in list(self._active.values()):
            self._end(easy.exchange, failed_response(easy.exchange.request, CLOSED, ERROR_NETWORK))
        for queue in (self._waiting, self._inbox):
            while queue:
                exchange = queue.popleft()
                self._resolve(exchange, failed_response(exchange.request, CLOSED, ERROR_NETWORK))
        for easy in self._free:
            easy.curl.close()
        self._free.clear()
        self.multi.close()
        self.selector.close()
        self._wake_r.close()
        self._wake_w.close()
