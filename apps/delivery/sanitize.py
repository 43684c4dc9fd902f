"""Making whatever an endpoint answers storable: one home for the rule, used by every write of a
response's traces (apps/delivery/outcomes.py).

An endpoint is chosen by a tenant and may answer anything: NUL bytes, invalid UTF-8, megabytes, a
malformed status line, odd bytes in headers. PostgreSQL refuses NUL in `text` and `\\u0000` in
`jsonb`, and psycopg cannot encode a lone surrogate; inside a COPY or a multi-row statement one such
value fails every row of the batch (docs/architecture.md, "Recording"). So every string that came
from, or is derived from, a response is cleaned here before it is stored:

- bytes are decoded as UTF-8, an invalid sequence becoming U+FFFD;
- NUL becomes U+FFFD (visible in the dashboard, unlike a silent removal), lone surrogates too;
- the result is cut to a limit in characters (and so in bytes: at most 4 per character), with a
  marker saying it was cut.
"""

import re

REPLACEMENT = "\ufffd"
TRUNCATED_MARK = "…[truncated]"
# NUL, and UTF-16 surrogates (only lone ones can occur in a str; psycopg cannot encode them).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")

RESPONSE_EXCERPT_CHARS = 4096
ERROR_CHARS = 1000
STATUS_REASON_CHARS = 500
HEADER_NAME_CHARS = 256
HEADER_VALUE_CHARS = 4096
MAX_STORED_HEADERS = 100
# RunAttempt.status_code and duration_ms are PostgreSQL `integer` columns (CHECK >= 0).
MAX_INTEGER = 2**31 - 1


def clean_text(value, limit: int) -> str:
    """`value` (str, bytes or None) as text PostgreSQL accepts, at most `limit` characters."""
    if value is None:
        return ""
    if isinstance(value, bytes | bytearray | memoryview):
        value = bytes(value).decode("utf-8", errors="replace")
    elif not isinstance(value, str):
        value = str(value)
    if len(value) > limit:
        keep = max(limit - len(TRUNCATED_MARK), 0)
        value = value[:keep] + TRUNCATED_MARK[: limit - keep]
    return _UNSTORABLE.sub(REPLACEMENT, value)


def clean_headers(headers: dict | None) -> dict[str, str]:
    """A header mapping as a JSON object PostgreSQL's jsonb accepts, bounded in size.

    Headers that need no cleaning (every name and value a str within its limit, no NUL and no
    surrogate anywhere: one search over them all) are copied as they are; the header-by-header
    cleaning, two calls per header, was ~2 % of a worker process's CPU in a spike, for the
    request headers of every attempt, which Chime built and which nearly always pass (issue #12)."""
    items = list((headers or {}).items())[:MAX_STORED_HEADERS]
    if all(
        type(name) is str and type(value) is str and len(name) <= HEADER_NAME_CHARS and len(value) <= HEADER_VALUE_CHARS
        for name, value in items
    ) and not _UNSTORABLE.search("".join(name + value for name, value in items)):
        return dict(items)
    cleaned: dict[str, str] = {}
    for name, value in items:
        cleaned[clean_text(name, HEADER_NAME_CHARS)] = clean_text(value, HEADER_VALUE_CHARS)
    return cleaned


def clean_integer(value) -> int | None:
    """A status code or a duration that fits a non-negative `integer` column, else None."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 <= value <= MAX_INTEGER else None
