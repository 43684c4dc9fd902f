"""Standard Webhooks signing (https://www.standardwebhooks.com/).

Pure Python: no Django imports. The Django layer decides which secrets are
active (several during a rotation) and calls :func:`webhook_headers` with the
exact bytes it is about to send.

The signed content is ``"{msg_id}.{timestamp}.{payload}"`` with ``timestamp``
as integer Unix seconds; the signature is ``v1,<base64 HMAC-SHA256>`` and a
receiver accepts the message if any of the space-separated signatures matches.
"""

from __future__ import annotations

import base64
import functools
import math
import secrets as _secrets
from collections.abc import Sequence
from datetime import UTC, datetime

from standardwebhooks import Webhook

__all__ = [
    "SECRET_PREFIX",
    "generate_signing_secret",
    "signature_header",
    "webhook_headers",
]

SECRET_PREFIX = "whsec_"  # noqa: S105 - a prefix, not a secret
_SECRET_BYTES = 32


def generate_signing_secret() -> str:
    """Return a new secret: ``whsec_`` + base64 of 32 random bytes."""
    raw = _secrets.token_bytes(_SECRET_BYTES)
    return SECRET_PREFIX + base64.b64encode(raw).decode("ascii")


def _unix_seconds(timestamp: datetime) -> int:
    if not isinstance(timestamp, datetime):
        raise TypeError("timestamp must be a datetime")
    if timestamp.tzinfo is None or timestamp.utcoffset() is None:
        # Webhook.sign() would silently treat a naive datetime as UTC, which is
        # wrong for naive local times; refuse rather than sign the wrong second.
        raise ValueError("timestamp must be timezone-aware")
    return math.floor(timestamp.astimezone(UTC).timestamp())


def _payload_text(payload: bytes) -> str:
    if not isinstance(payload, bytes | bytearray | memoryview):
        raise TypeError("payload must be bytes (the exact bytes that will be sent)")
    try:
        # standardwebhooks signs str and re-encodes it as UTF-8, so decoding
        # strictly guarantees the HMAC covers exactly these bytes.
        return bytes(payload).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError("payload must be valid UTF-8") from exc


def _signature_header(secrets: Sequence[str], msg_id: str, unix_seconds: int, text: str) -> str:
    if isinstance(secrets, str | bytes):
        raise TypeError("secrets must be a sequence of secrets, not a single string")
    if not secrets:
        raise ValueError("at least one signing secret is required")
    if not msg_id:
        raise ValueError("msg_id must not be empty")
    # A UTC datetime rebuilt from the integer seconds: Webhook.sign() replaces
    # tzinfo with UTC *without converting*, so it must already be UTC.
    sign_at = datetime.fromtimestamp(unix_seconds, tz=UTC)
    return " ".join(_webhook(secret).sign(msg_id, sign_at, text) for secret in secrets)


@functools.lru_cache(maxsize=256)
def _webhook(secret: str) -> Webhook:
    """The reference implementation's signer for one secret, built once: its constructor decodes
    the secret's base64 for every message otherwise (a delivery signs one per run). Bounded; the
    secrets signed with are still chosen per message by the caller."""
    return Webhook(secret)


def signature_header(secrets: Sequence[str], msg_id: str, timestamp: datetime, payload: bytes) -> str:
    """Value for the ``webhook-signature`` header: ``v1,<sig>`` per secret."""
    return _signature_header(secrets, msg_id, _unix_seconds(timestamp), _payload_text(payload))


def webhook_headers(*, secrets: Sequence[str], msg_id: str, timestamp: datetime, payload: bytes) -> dict[str, str]:
    """The three Standard Webhooks headers for one message.

    ``webhook-timestamp`` is the same integer second that was signed.
    """
    unix_seconds = _unix_seconds(timestamp)
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(unix_seconds),
        "webhook-signature": _signature_header(secrets, msg_id, unix_seconds, _payload_text(payload)),
    }
