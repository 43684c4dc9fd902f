"""What the sync and async clients share: building requests, when to retry, reading answers.

Retries: a 429 is always retried (the server refused before doing anything); a 502/503/504, or
no answer at all, only when repeating cannot do the work twice: GET, DELETE, PATCH (idempotent
here), or a POST carrying an Idempotency-Key (``jobs.create`` sends one by default). The wait is
``Retry-After`` when the server sends one, else exponential backoff with full jitter; never more
than ``max_retry_wait_seconds`` per wait, at most ``max_retries`` retries.
"""

from __future__ import annotations

import email.utils
import random
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import httpx

from .errors import error_for

API_PREFIX = "/api/v1"
RETRY_STATUSES = {429, 502, 503, 504}
SAFE_METHODS = {"GET", "HEAD", "DELETE", "PATCH", "PUT"}


@dataclass
class Call:
    """One API operation, before it is sent."""

    method: str
    path: str  # below /api/v1, e.g. "/jobs"
    params: dict[str, Any] = field(default_factory=dict)
    json: Any = None
    headers: dict[str, str] = field(default_factory=dict)

    def retry_safe(self) -> bool:
        return self.method in SAFE_METHODS or "Idempotency-Key" in self.headers


def api_root(base_url: str) -> str:
    """``http://host:8000``, ``.../api/v1`` or ``.../api/v1/``: all mean the same API."""
    root = base_url.rstrip("/")
    return root[: -len(API_PREFIX)] if root.endswith(API_PREFIX) else root


def clean_params(params: dict[str, Any]) -> dict[str, str]:
    """Drop unset filters (the API refuses unknown and blank ones alike)."""
    return {k: when(v) if isinstance(v, datetime) else str(v) for k, v in params.items() if v is not None}


def when(value: datetime | str | None) -> str | None:
    """A time for the API: ISO 8601 with an offset (the API refuses naive times; so does this)."""
    if value is None or isinstance(value, str):
        return value
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("times must be timezone-aware (e.g. datetime.now(UTC))")
    return value.isoformat()


def next_call(next_url: str | None) -> Call | None:
    """The request for a ``next`` link: its path and query on the client's own base URL (behind a
    proxy the server may name another scheme or host than the one the client reaches)."""
    if not next_url:
        return None
    parts = urlsplit(next_url)
    return Call("GET", parts.path, params=dict(parse_qsl(parts.query, keep_blank_values=True)))


def retry_after_seconds(value: str | None) -> float | None:
    """``Retry-After``: seconds, or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


@dataclass
class RetryPolicy:
    max_retries: int = 3
    max_retry_wait_seconds: float = 30.0
    backoff_seconds: float = 0.5

    def wait(self, attempt: int, response: httpx.Response | None) -> float:
        told = retry_after_seconds(response.headers.get("retry-after")) if response is not None else None
        if told is None:
            told = random.uniform(0, self.backoff_seconds * 2**attempt)
        return min(told, self.max_retry_wait_seconds)

    def should_retry(self, call: Call, attempt: int, response: httpx.Response | None) -> bool:
        if attempt >= self.max_retries:
            return False
        if response is None:
            return call.retry_safe()
        if response.status_code == 429:
            return True
        return response.status_code in RETRY_STATUSES and call.retry_safe()


def result(response: httpx.Response) -> Any:
    """The parsed body of a success, or the matching :class:`~chime_client.errors.ApiError`."""
    if response.status_code == 204 or not response.content:
        body = None
    elif response.headers.get("content-type", "").startswith(("application/gzip", "application/octet-stream")):
        body = response.content  # a file (an archive download): its bytes as they are
    else:
        try:
            body = response.json()
        except ValueError:
            body = response.text
    if response.is_success:
        return body
    raise error_for(response.status_code, body, {k.lower(): v for k, v in response.headers.items()})
