"""Rules for a job's webhook target, shared by every interface (API and dashboard)."""

from django.conf import settings

from apps.delivery.safety import InvalidTarget, UnsafeTarget, check_url

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
_HEADER_NAME_FORBIDDEN = frozenset('()<>@,;:\\"/[]?={}')


class TargetError(ValueError):
    """A target a job may not have; the message is for the user."""


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
        if not name or not all(33 <= ord(c) < 127 and c not in _HEADER_NAME_FORBIDDEN for c in name):
            raise TargetError(f"'{name}' is not a valid header name.")
        if name.lower() in RESERVED_HEADERS:
            raise TargetError(f"'{name}' is set by Chime and cannot be overridden.")
        if "\r" in value or "\n" in value:
            raise TargetError(f"The value of '{name}' contains a line break.")
        if len(value) > MAX_HEADER_VALUE_LENGTH:
            raise TargetError(f"The value of '{name}' is longer than {MAX_HEADER_VALUE_LENGTH} characters.")
