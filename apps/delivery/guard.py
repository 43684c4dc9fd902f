"""SSRF guard of the transport, and the human message of a failed request.

The connector's resolver is a :class:`GuardedResolver` that refuses the whole lookup if ANY
resolved address is disallowed; aiohttp connects only to addresses its resolver returned, so the
checked address is the one used. aiohttp skips the resolver for IP-literal hosts, hence
:func:`guard_parsed_url`, which re-checks the host exactly as yarl parsed it.
"""

from __future__ import annotations

import ipaddress
import logging
import socket

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import ThreadedResolver
from yarl import URL

from .safety import InvalidTarget, UnsafeTarget, address_refusal_reason, refusal_message, refuse_address
from .webhook_types import ERROR_INVALID_TARGET, ERROR_NETWORK, ERROR_REFUSED, ERROR_TIMEOUT, WebhookRequest

logger = logging.getLogger(__name__)


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
            refuse_address(result["host"], host=host, allow_private_networks=self._allow_private_networks)
        return results

    async def close(self) -> None:
        await self._resolver.close()


def guard_parsed_url(url: str, allow_private_networks: bool) -> URL:
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


def describe_error(exc: Exception, request: WebhookRequest) -> tuple[str, str]:
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
    logger.exception("unexpected error delivering webhook %s", request.key, extra={"webhook_id": request.key})
    return f"unexpected error: {type(exc).__name__}: {exc}", ERROR_NETWORK


def _os_error_text(error: OSError) -> str:
    text = error.strerror or str(error) or type(error).__name__
    return text
