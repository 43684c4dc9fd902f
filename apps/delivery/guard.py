"""SSRF guard of the transport, and the human message of a failed request.

Two checks, and the second is the one that cannot be raced:

- :func:`target_url`, before a request is handed to libcurl: the URL's syntax and any IP literal
  in it (:func:`apps.delivery.safety.check_url`, which also refuses the legacy numeric forms such
  as ``2130706433`` outright), and the URL as libcurl gets it: encoded by yarl (punycode host,
  percent-encoded path) the way the aiohttp transport sent it before;
- :class:`ConnectGuard`, libcurl's CURLOPT_OPENSOCKETFUNCTION: called with the address libcurl is
  about to connect to, after its own DNS resolution, for every new connection (a reused
  keep-alive connection was checked when it opened). A refused address gets no socket, so the
  checked address is the one used: no DNS rebinding window, whatever a name resolves to or how
  often. A name that resolves to a public and a private address can only ever reach the public
  one; when every address is refused the request fails as ``refused``, naming them.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
from dataclasses import dataclass

import pycurl
from yarl import URL

from .safety import InvalidTarget, UnsafeTarget, address_refusal_reason, check_url, refusal_message
from .webhook_types import ERROR_INVALID_TARGET, ERROR_NETWORK, ERROR_REFUSED, ERROR_TIMEOUT, WebhookRequest

logger = logging.getLogger(__name__)

_E_WEIRD_SERVER_REPLY = 8  # pycurl names it only as FTP's


@dataclass(frozen=True, slots=True)
class Target:
    """A checked URL: what libcurl is given, and the host and port messages name."""

    url: str
    host: str
    port: int


def target_url(url: str, *, allow_private_networks: bool) -> Target:
    """Raise InvalidTarget or UnsafeTarget unless `url` may be sent to; else the URL for libcurl.
    A pure function of its arguments (no DNS: names are checked at connect time)."""
    check_url(url, allow_private_networks=allow_private_networks)
    try:
        parsed = URL(url)
    except (ValueError, TypeError) as exc:
        raise InvalidTarget(f"invalid URL: {exc}") from exc
    if parsed.scheme not in ("http", "https") or not parsed.raw_host:
        raise InvalidTarget("invalid URL")
    if parsed.user is not None or parsed.password is not None:
        raise InvalidTarget("credentials in the URL are not allowed")
    host = parsed.raw_host
    return Target(url=str(parsed), host=f"[{host}]" if ":" in host else host, port=parsed.port or 0)


class ConnectGuard:
    """CURLOPT_OPENSOCKETFUNCTION of one easy handle: opens the socket for an allowed address and
    refuses any other (CURL_SOCKET_BAD), noting the address and why in `refused` (the handle's
    list, read when its request ends)."""

    __slots__ = ("allow_private_networks", "refused")

    def __init__(self, *, allow_private_networks: bool, refused: list) -> None:
        self.allow_private_networks = allow_private_networks
        self.refused = refused

    def __call__(self, purpose: int, address) -> int:
        try:
            ip = address.addr[0]
            reason = address_refusal_reason(ip, allow_private_networks=self.allow_private_networks)
            if reason is not None:
                self.refused.append((ip, reason))
                return pycurl.SOCKET_BAD
            sock = socket.socket(address.family, address.socktype, address.protocol)
            return sock.detach()  # libcurl owns the descriptor from here, and closes it
        except Exception:  # a callback must not raise into libcurl
            logger.exception("webhook transport: could not open a socket")
            return pycurl.SOCKET_BAD


def refusal_text(host: str, refused: list[tuple[str, str]], *, allow_private_networks: bool) -> str:
    """Every address of `host` the guard refused, the first with its reason and remedy."""
    (address, reason), others = refused[0], sorted({ip for ip, _ in refused[1:]} - {refused[0][0]})
    text = refusal_message(address, reason, host=host.strip("[]"), allow_private_networks=allow_private_networks)
    if others:
        text += f"; also refused: {', '.join(others)}"
    return text


def timeout_message(request: WebhookRequest) -> str:
    """What a request that ran out of time says (libcurl's timeout and the loop's watchdog alike)."""
    return f"timed out after {request.timeout_seconds:g}s"


def describe_failure(code: int, message: str, *, exchange, os_errno: int) -> tuple[str, str]:
    """(human message, error_kind) of a transfer libcurl ended with error `code` (no usable
    response). Refusals by the guard are told apart by the caller, before this."""
    target, request = exchange.target, exchange.request
    where = f"{target.host}:{target.port}" if target.port else target.host
    if code == pycurl.E_OPERATION_TIMEDOUT:
        return timeout_message(request), ERROR_TIMEOUT
    if code == pycurl.E_COULDNT_RESOLVE_HOST:
        return f"DNS lookup failed for {target.host}: {message}", ERROR_NETWORK
    if code == pycurl.E_COULDNT_CONNECT:
        if os_errno == errno.ECONNREFUSED:
            return f"connection refused by {where}", ERROR_NETWORK
        if os_errno == errno.ETIMEDOUT:
            return f"connection to {where} timed out", ERROR_TIMEOUT
        detail = os.strerror(os_errno) if os_errno else message
        return f"could not connect to {where}: {detail}", ERROR_NETWORK
    if code == pycurl.E_PEER_FAILED_VERIFICATION:
        return f"TLS certificate verification failed for {target.host}: {message}", ERROR_NETWORK
    if code == pycurl.E_SSL_CONNECT_ERROR:
        return f"TLS error: {message}", ERROR_NETWORK
    if code == pycurl.E_GOT_NOTHING:
        return "server closed the connection without a complete response", ERROR_NETWORK
    if code in (_E_WEIRD_SERVER_REPLY, pycurl.E_UNSUPPORTED_PROTOCOL):
        # The scheme was checked before: libcurl says "unsupported protocol" of a response whose
        # status line is not HTTP/1.x (a hostile or broken endpoint), as "weird" of others.
        return f"invalid HTTP response: {message}", ERROR_NETWORK
    if code == pycurl.E_URL_MALFORMAT:
        return f"invalid target: {message}", ERROR_INVALID_TARGET
    return f"network error: {message or f'libcurl error {code}'}", ERROR_NETWORK


def describe_error(exc: Exception, request: WebhookRequest) -> tuple[str, str]:
    """(human message, error_kind) of a request refused before it was handed to libcurl."""
    if isinstance(exc, UnsafeTarget):
        return f"refused: {exc}", ERROR_REFUSED
    if isinstance(exc, InvalidTarget):
        return f"invalid target: {exc}", ERROR_INVALID_TARGET
    if isinstance(exc, ValueError):
        # e.g. CR/LF in a header value: a configuration problem, not retryable.
        return f"invalid request: {exc}", ERROR_INVALID_TARGET
    logger.exception("unexpected error delivering webhook %s", request.key, extra={"webhook_id": request.key})
    return f"unexpected error: {type(exc).__name__}: {exc}", ERROR_NETWORK
