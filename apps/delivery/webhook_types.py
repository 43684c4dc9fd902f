"""The request and response of one webhook delivery, the error kinds a failed one reports, and
Retry-After parsing. Pure Python (no Django, no aiohttp): shared by the transport, the window and
the recording of outcomes."""

from __future__ import annotations

import email.utils
import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime

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


@dataclass
class WebhookRequest:
    key: str
    url: str
    method: str
    headers: dict[str, str]
    body: bytes
    timeout_seconds: float
    # The attempt's OpenTelemetry span (apps/core/tracing.py), ended when its outcome is recorded;
    # None when tracing is off.
    span: object = field(default=None, repr=False, compare=False)
    # The headers the attempt need not store, as build_request made them
    # (apps/jobs/attempt_headers.py derivable_headers); None: worked out again when recorded.
    derivable: dict | None = field(default=None, repr=False, compare=False)

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


def failed_response(request: WebhookRequest, error: str, kind: str) -> WebhookResponse:
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
