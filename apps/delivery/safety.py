"""SSRF guard primitives for webhook targets.

Pure Python: no Django imports.

* :func:`is_address_allowed` / :func:`address_refusal_reason` decide whether
  one IP address may be connected to.
* :func:`is_header_name` says whether a header name is an HTTP token: one rule for the
  check when a job is saved (apps/jobs/targets.py) and the one before every send
  (apps/delivery/transport.py).
* :func:`check_url` is a syntax-level check of a target URL (used when a job
  is created and again right before every send). It does not resolve DNS
  names; the transport's resolver checks every address a name resolves to.
"""

from __future__ import annotations

import functools
import ipaddress
import re
import socket
import unicodedata
from urllib.parse import urlsplit

__all__ = [
    "PRIVATE_NETWORKS_SETTING",
    "InvalidTarget",
    "UnsafeTarget",
    "address_refusal_reason",
    "check_url",
    "is_address_allowed",
    "is_header_name",
    "refusal_message",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# RFC 9110's token: visible ASCII but the separators ()<>@,;:\"/[]?={}.
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


@functools.lru_cache(maxsize=4096)
def is_header_name(name) -> bool:
    """Whether `name` is a header name that can be sent as it is (an HTTP token). Remembered: the
    worker asks it for every header of every request, and a run's names are the same every time
    (issue #12). Bounded: names are the tenants' choice."""
    return isinstance(name, str) and _TOKEN.fullmatch(name) is not None


#: Name of the setting an operator flips to allow private targets (named in
#: refusal messages only).
PRIVATE_NETWORKS_SETTING = "WEBHOOK_ALLOW_PRIVATE_NETWORKS"


class UnsafeTarget(Exception):
    """The target address is not allowed (SSRF guard)."""

    def __init__(self, message: str, *, host: str | None = None, address: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.host = host
        self.address = address

    def __str__(self) -> str:
        return self.message


class InvalidTarget(ValueError):
    """The target URL is syntactically unacceptable."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


# --------------------------------------------------------------------------
# Addresses
# --------------------------------------------------------------------------

_N4 = ipaddress.IPv4Network
_N6 = ipaddress.IPv6Network

# Explicit lists, because ``is_global``/``is_private`` vary between Python
# versions (3.11 treats e.g. multicast, 192.0.0.192 and fec0::/10 as global).
_V4_ALWAYS_REFUSED: list[tuple[ipaddress.IPv4Network, str]] = [
    (_N4("0.0.0.0/8"), "an unspecified ('this network') address"),
    (_N4("224.0.0.0/4"), "a multicast address"),
    (_N4("255.255.255.255/32"), "a broadcast address"),
]
_V4_NON_PUBLIC: list[tuple[ipaddress.IPv4Network, str]] = [
    (_N4("127.0.0.0/8"), "a loopback address"),
    (_N4("169.254.169.254/32"), "a link-local address (cloud metadata endpoint)"),
    (_N4("169.254.0.0/16"), "a link-local address"),
    (_N4("10.0.0.0/8"), "a private address"),
    (_N4("172.16.0.0/12"), "a private address"),
    (_N4("192.168.0.0/16"), "a private address"),
    (_N4("100.64.0.0/10"), "a shared (carrier-grade NAT) address"),
    (_N4("192.0.0.0/24"), "a reserved (IETF protocol assignment) address"),
    (_N4("192.0.2.0/24"), "a reserved (documentation) address"),
    (_N4("198.51.100.0/24"), "a reserved (documentation) address"),
    (_N4("203.0.113.0/24"), "a reserved (documentation) address"),
    (_N4("198.18.0.0/15"), "a reserved (benchmarking) address"),
    (_N4("192.88.99.0/24"), "a reserved (6to4 relay) address"),
    (_N4("240.0.0.0/4"), "a reserved address"),
]
_V6_ALWAYS_REFUSED: list[tuple[ipaddress.IPv6Network, str]] = [
    (_N6("::/128"), "an unspecified address"),
    (_N6("ff00::/8"), "a multicast address"),
]
_V6_NON_PUBLIC: list[tuple[ipaddress.IPv6Network, str]] = [
    (_N6("::1/128"), "a loopback address"),
    (_N6("fe80::/10"), "a link-local address"),
    (_N6("fd00:ec2::254/128"), "a unique local address (cloud metadata endpoint)"),
    (_N6("fc00::/7"), "a unique local (private IPv6) address"),
    (_N6("fec0::/10"), "a site-local address"),
    (_N6("64:ff9b:1::/48"), "a local-use NAT64 address"),
    (_N6("100::/64"), "a reserved (discard) address"),
    (_N6("2001:db8::/32"), "a reserved (documentation) address"),
    (_N6("3fff::/20"), "a reserved (documentation) address"),
    (_N6("2001::/23"), "a reserved (IETF protocol assignment) address"),
    (_N6("5f00::/16"), "a reserved (SRv6) address"),
    (_N6("::/8"), "a reserved address"),
]
_NAT64_WKP = _N6("64:ff9b::/96")


def _parse_address(ip: str | IPAddress) -> IPAddress | None:
    if isinstance(ip, ipaddress.IPv4Address | ipaddress.IPv6Address):
        return ip
    if not isinstance(ip, str):
        return None
    text = ip.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _embedded_ipv4(addr: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address a v6 address really designates, if it embeds one."""
    if addr.ipv4_mapped is not None:  # ::ffff:a.b.c.d
        return addr.ipv4_mapped
    if addr in _NAT64_WKP:  # 64:ff9b::a.b.c.d (RFC 6052 well-known prefix)
        return ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
    if addr.sixtofour is not None:  # 2002:AABB:CCDD::/48
        return addr.sixtofour
    return None


def address_refusal_reason(ip: str | IPAddress, *, allow_private_networks: bool) -> str | None:
    """``None`` if ``ip`` may be connected to, else a short reason such as
    ``"a private address"``. Unparseable input is refused."""
    addr = _parse_address(ip)
    if addr is None:
        return "not a valid IP address"
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.scope_id:
            addr = ipaddress.IPv6Address(addr.compressed.split("%", 1)[0])
        embedded = _embedded_ipv4(addr)
        if embedded is not None:
            return address_refusal_reason(embedded, allow_private_networks=allow_private_networks)
        always, non_public = _V6_ALWAYS_REFUSED, _V6_NON_PUBLIC
    else:
        always, non_public = _V4_ALWAYS_REFUSED, _V4_NON_PUBLIC

    for network, reason in always:
        if addr in network:
            return reason
    if addr.is_unspecified:
        return "an unspecified address"
    if addr.is_multicast:
        return "a multicast address"
    if allow_private_networks:
        return None
    for network, reason in non_public:
        if addr in network:
            return reason
    if addr.is_loopback:
        return "a loopback address"
    if addr.is_link_local:
        return "a link-local address"
    if addr.is_private:
        return "a private address"
    if addr.is_reserved:
        return "a reserved address"
    if not addr.is_global:
        return "not a globally routable address"
    return None


def is_address_allowed(ip: str | IPAddress, *, allow_private_networks: bool) -> bool:
    """True if connecting to ``ip`` is allowed.

    IPv4-mapped (``::ffff:a.b.c.d``), NAT64 (``64:ff9b::/96``) and 6to4
    (``2002::/16``) addresses are judged by the IPv4 address they embed.
    Without ``allow_private_networks`` only globally routable unicast
    addresses pass; with it, everything except unspecified, broadcast and
    multicast addresses passes.
    """
    return address_refusal_reason(ip, allow_private_networks=allow_private_networks) is None


def _display(ip: str | IPAddress) -> str:
    addr = _parse_address(ip)
    if addr is None:
        return str(ip)
    if isinstance(addr, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(addr)
        if embedded is not None:
            return f"{addr} (IPv4 {embedded})"
    return str(addr)


def refusal_message(
    address: str | IPAddress,
    reason: str,
    *,
    host: str | None = None,
    allow_private_networks: bool = False,
) -> str:
    """Human message, e.g. ``10.0.0.1 is a private address (set ... to allow)``
    or ``localhost resolves to 127.0.0.1, which is a loopback address (...)``."""
    shown = _display(address)
    if host is not None and host.strip("[]").lower() != str(address).lower():
        text = f"{host} resolves to {shown}, which is {reason}"
    else:
        text = f"{shown} is {reason}"
    if not allow_private_networks and (address_refusal_reason(address, allow_private_networks=True) is None):
        text += f" (set {PRIVATE_NETWORKS_SETTING}=true to allow)"
    return text


def refuse_address(address: str | IPAddress, *, host: str | None, allow_private_networks: bool) -> None:
    """Raise UnsafeTarget if `address` may not be connected to; the one check every path uses
    (URL literals here, DNS answers in apps/delivery/guard.py)."""
    reason = address_refusal_reason(address, allow_private_networks=allow_private_networks)
    if reason is not None:
        raise UnsafeTarget(
            refusal_message(
                address,
                reason,
                host=host,
                allow_private_networks=allow_private_networks,
            ),
            host=host,
            address=str(address),
        )


# --------------------------------------------------------------------------
# URLs
# --------------------------------------------------------------------------

_ALLOWED_SCHEMES = frozenset({"http", "https"})
_CANONICAL_V4 = re.compile(
    r"(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}"
    r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])",
    re.ASCII,
)
# WHATWG URL "ends in a number": a host whose last label is decimal or 0x-hex
# is parsed as IPv4 by browsers and by inet_aton-style resolvers.
_NUMERIC_LABEL = re.compile(r"(?:[0-9]+|0[xX][0-9a-fA-F]*)", re.ASCII)
_HOST_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?", re.ASCII)
_DIGITS = re.compile(r"[0-9]+", re.ASCII)


def _bad_char(url: str) -> str | None:
    for ch in url:
        if ch == "\\":
            return "a backslash"
        if ch.isspace():
            return "whitespace"
        category = unicodedata.category(ch)
        if category[0] in "CZ":
            return "control or invisible characters"
    return None


def _split_netloc(netloc: str) -> tuple[str, bool, str | None]:
    """(host, is_bracketed_ipv6, port_text_or_None) of an authority without
    userinfo."""
    if netloc.startswith("["):
        end = netloc.find("]")
        if end == -1:
            raise InvalidTarget("invalid URL: unterminated '[' in host")
        host, rest = netloc[1:end], netloc[end + 1 :]
        if rest and not rest.startswith(":"):
            raise InvalidTarget("invalid URL: unexpected characters after ']'")
        return host, True, (rest[1:] if rest else None)
    if "[" in netloc or "]" in netloc:
        raise InvalidTarget("invalid URL: misplaced '[' or ']' in host")
    if netloc.count(":") > 1:
        raise InvalidTarget("invalid URL: IPv6 addresses must be written in [brackets]")
    host, sep, port = netloc.partition(":")
    return host, False, (port if sep else None)


def _check_port(port_text: str | None) -> None:
    if port_text is None or port_text == "":
        return  # scheme default
    if not _DIGITS.fullmatch(port_text):
        raise InvalidTarget(f"invalid port {port_text!r}: must be a number")
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise InvalidTarget(f"invalid port {port}: must be between 1 and 65535")


def _ascii_host(host: str) -> str:
    if host.isascii():
        return host.lower()
    try:
        # Stdlib IDNA 2003 applies nameprep (NFKC-ish) and treats U+3002 etc.
        # as dots, so fullwidth digits collapse to what a resolver would see.
        return host.encode("idna").decode("ascii").lower()
    except UnicodeError as exc:
        raise InvalidTarget(f"invalid internationalized host name {host!r}") from exc


def check_url(url: str, *, allow_private_networks: bool) -> None:
    """Raise :class:`InvalidTarget` (bad syntax) or :class:`UnsafeTarget`
    (refused address) unless ``url`` is an acceptable webhook target.

    Checks: http/https only; a host is present; no ``user:pass@``; port
    1-65535; no whitespace, control characters or backslashes (which parsers
    disagree about); IP-literal hosts must be allowed addresses; legacy
    numeric forms (``2130706433``, ``0x7f.1``, ``0177.0.0.1``, ``127.1``)
    are refused outright. Host names are NOT resolved here.
    """
    if not isinstance(url, str):
        raise InvalidTarget("URL must be a string")
    if not url:
        raise InvalidTarget("URL is empty")
    bad = _bad_char(url)
    if bad is not None:
        raise InvalidTarget(f"URL must not contain {bad}")
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise InvalidTarget(f"invalid URL: {exc}") from exc

    scheme = parts.scheme.lower()
    if not scheme:
        raise InvalidTarget("URL must start with http:// or https://")
    if scheme not in _ALLOWED_SCHEMES:
        raise InvalidTarget(f"unsupported URL scheme {scheme!r}: only http and https are allowed")
    if not url[len(parts.scheme) + 1 :].startswith("//"):
        raise InvalidTarget("URL has no host")
    netloc = parts.netloc
    if "@" in netloc:
        raise InvalidTarget(
            "credentials in the URL (user:password@host) are not allowed; send credentials in a header instead"
        )
    host, bracketed, port_text = _split_netloc(netloc)
    if not host:
        raise InvalidTarget("URL has no host")
    _check_port(port_text)

    if bracketed:
        if "%" in host:
            raise InvalidTarget("IPv6 zone identifiers are not allowed in URLs")
        try:
            addr = ipaddress.IPv6Address(host)
        except ValueError as exc:
            raise InvalidTarget(f"invalid IPv6 address [{host}]") from exc
        refuse_address(addr, host=None, allow_private_networks=allow_private_networks)
        return

    if "%" in host:
        raise InvalidTarget("percent-encoded host names are not allowed")
    ascii_host = _ascii_host(host)
    labels = ascii_host.split(".")
    last = labels[-1] if labels[-1] or len(labels) == 1 else labels[-2]
    if _NUMERIC_LABEL.fullmatch(last):
        if host.isascii() and _CANONICAL_V4.fullmatch(ascii_host):
            refuse_address(
                ipaddress.IPv4Address(ascii_host),
                host=None,
                allow_private_networks=allow_private_networks,
            )
            return
        try:
            meaning = socket.inet_ntoa(socket.inet_aton(ascii_host.rstrip(".")))
        except OSError:
            meaning = None
        detail = f" (it would be read as {meaning})" if meaning else ""
        raise UnsafeTarget(
            f"{host} is a non-standard numeric IP address form{detail}; "
            "write IPv4 addresses as four decimal numbers like 203.0.113.7",
            host=host,
            address=meaning or host,
        )

    name = ascii_host[:-1] if ascii_host.endswith(".") else ascii_host
    if len(name) > 253 or not all(_HOST_LABEL.fullmatch(lbl) for lbl in name.split(".")):
        raise InvalidTarget(f"invalid host name {host!r}")
