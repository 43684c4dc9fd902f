"""The API's error shape as exceptions.

Every failure of the API is ``{"error": {"code", "message", "fields"?, "limit"?}}`` with a status
(docs/api.md#conventions); :func:`error_for` turns one into the matching :class:`ApiError`
subclass, so ``except ValidationError as e: e.fields["schedule.expression"]`` works.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ApiError",
    "AuthenticationError",
    "ChimeError",
    "ConflictError",
    "NotFoundError",
    "PayloadTooLargeError",
    "QuotaExceededError",
    "RateLimitedError",
    "ServerError",
    "TransportError",
    "ValidationError",
    "error_for",
]


class ChimeError(Exception):
    """Anything the SDK raises about talking to Chime."""


class TransportError(ChimeError):
    """No answer: the connection failed or timed out (after the retries)."""


class ApiError(ChimeError):
    """An error answer. ``fields``: dotted field path -> messages (validation errors);
    ``limit``: the tenant limit refused (``{"name", "value"}``) for quota and rate errors."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        fields: dict[str, list[str]] | None = None,
        limit: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.fields = fields or {}
        self.limit = limit
        self.headers = headers or {}


class ValidationError(ApiError):
    """400: the request is invalid; see ``fields``."""


class AuthenticationError(ApiError):
    """401: no key, a wrong key or a revoked key."""


class QuotaExceededError(ApiError):
    """403: the tenant holds all the jobs or keys its limits allow."""


class NotFoundError(ApiError):
    """404: no such object for this tenant."""


class ConflictError(ApiError):
    """409: the object's state does not allow the action, or an Idempotency-Key reused."""


class PayloadTooLargeError(ApiError):
    """413: the request body is over the server's limit."""


class RateLimitedError(ApiError):
    """429: over a rate; ``retry_after_seconds`` says when to come back."""

    @property
    def retry_after_seconds(self) -> float | None:
        from ._http import retry_after_seconds

        return retry_after_seconds(self.headers.get("retry-after"))


class ServerError(ApiError):
    """5xx."""


_BY_STATUS = {
    400: ValidationError,
    401: AuthenticationError,
    403: QuotaExceededError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    429: RateLimitedError,
}


def error_for(status: int, body: Any, headers: dict[str, str] | None = None) -> ApiError:
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        error = {"code": "http_error", "message": str(body)[:500] if body else f"HTTP {status}"}
    kind = _BY_STATUS.get(status, ServerError if status >= 500 else ApiError)
    return kind(
        status,
        str(error.get("code", "")),
        str(error.get("message", "")),
        fields=error.get("fields"),
        limit=error.get("limit"),
        headers=headers,
    )
