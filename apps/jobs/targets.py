"""Rules for a job's webhook target, shared by every interface (API and dashboard).

Also the one home of the NUL rule for input: PostgreSQL cannot store U+0000 in `text` or
`\\u0000` in `jsonb`, so input holding it is refused with a field-level message (never a 500).
Plain string fields get it from Django's and DRF's CharField (ProhibitNullCharactersValidator,
"Null characters are not allowed."); the JSON body and the header mapping are checked here.
"""

import json

from django.conf import settings

from apps.delivery.safety import InvalidTarget, UnsafeTarget, check_url, is_header_name

HTTP_METHODS = ("POST", "PUT", "PATCH", "DELETE", "GET")
# Set by Chime on every delivery; a job may not override them.
RESERVED_HEADERS = frozenset(
    {
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
        "idempotency-key",
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "chime-attempt",
        "chime-scheduled-for",
        "chime-job-id",
        "chime-run-id",
    }
)
MAX_HEADERS = 50
MAX_HEADER_VALUE_LENGTH = 4096


class TargetError(ValueError):
    """A target a job may not have; the message is for the user."""


NUL = "\x00"


def nul_path(value) -> str | None:
    """Where the first NUL sits in a JSON value (in a string or an object key), as a path like
    `items[2].name`; "" for the value itself; None if there is none. Iterative: a deeply nested
    body must not hit the recursion limit."""
    stack = [("", value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            if NUL in item:
                return path
        elif isinstance(item, dict):
            for key, child in reversed(list(item.items())):
                where = f"{path}.{key}" if path else str(key)
                if NUL in str(key):
                    return where.replace(NUL, "\\u0000")
                stack.append((where, child))
        elif isinstance(item, list):
            stack.extend((f"{path}[{index}]", child) for index, child in reversed(list(enumerate(item))))
    return None


def check_no_nul(value) -> None:
    """Refuse a value (a string or any JSON) that holds U+0000."""
    where = nul_path(value)
    if where is not None:
        at = f" (at {where})" if where else ""
        raise TargetError(f"Null characters (\\u0000) are not allowed{at}.")


MAX_BODY_DEPTH = 32  # nesting levels of objects and arrays; real payloads use a handful
MAX_BODY_BYTES = 64 * 1024  # the body as compact JSON; the whole request is capped apart (413)

# One encoder for the process: json.dumps with any option builds a JSONEncoder per call, ~1 µs of
# each run's request (issue #12).
_compact_utf8 = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def body_bytes(body) -> bytes:
    """The exact bytes a JSON body is sent as (compact, UTF-8): what the worker signs and sends,
    and what MAX_BODY_BYTES measures."""
    return _compact_utf8(body).encode()


def json_depth(value) -> int:
    """How deeply objects and arrays nest in a JSON value (a scalar is 0). Iterative, like nul_path:
    the point is to refuse a deep body before anything recursive (json.dumps, jsonb) meets it."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            depth += 1
            deepest = max(deepest, depth)
            if depth > MAX_BODY_DEPTH:
                return depth  # deep enough to refuse; no need to walk the rest
            stack.extend((child, depth) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def check_target_body(body, *, method: str | None = None) -> None:
    """The one home of the body rules: no NUL, at most MAX_BODY_DEPTH levels and MAX_BODY_BYTES, and
    none for a GET (a GET is sent without a body; storing one would silently drop it)."""
    if body is None:
        return
    if method == "GET":
        raise TargetError("A GET request has no body: remove target.body or use another method.")
    if json_depth(body) > MAX_BODY_DEPTH:
        raise TargetError(f"Nested more than {MAX_BODY_DEPTH} levels deep.")
    check_no_nul(body)
    size = len(body_bytes(body))
    if size > MAX_BODY_BYTES:
        raise TargetError(f"At most {MAX_BODY_BYTES} bytes as JSON; this one is {size}.")


def check_target_url(url: str) -> None:
    """Syntax, scheme, and literal private addresses (names are checked again at delivery)."""
    try:
        check_url(url, allow_private_networks=settings.WEBHOOK_ALLOW_PRIVATE_NETWORKS)
    except (InvalidTarget, UnsafeTarget) as error:
        raise TargetError(str(error)) from error


def check_target_headers(headers: dict[str, str]) -> None:
    if len(headers) > MAX_HEADERS:
        raise TargetError(f"At most {MAX_HEADERS} headers.")
    for name, value in headers.items():
        if NUL in name or NUL in value:
            raise TargetError(f"The header '{name.replace(NUL, '')}' contains a null character (\\u0000).")
        if not is_header_name(name):
            raise TargetError(f"'{name}' is not a valid header name.")
        if name.lower() in RESERVED_HEADERS:
            raise TargetError(f"'{name}' is set by Chime and cannot be overridden.")
        if "\r" in value or "\n" in value:
            raise TargetError(f"The value of '{name}' contains a line break.")
        if len(value) > MAX_HEADER_VALUE_LENGTH:
            raise TargetError(f"The value of '{name}' is longer than {MAX_HEADER_VALUE_LENGTH} characters.")
