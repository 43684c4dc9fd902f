"""Standard Webhooks signing (https://www.standardwebhooks.com/).

Pure Python: no Django imports. The Django layer decides which secrets are
active (several during a rotation) and calls :func:`webhook_headers` with the
exact bytes it is about to send.

The signed content is ``"{msg_id}.{timestamp}.{payload}"`` with ``timestamp``
as integer Unix seconds; the signature is ``v1,<base64 HMAC-SHA256>`` and a
receiver accepts the message if any of the space-separated signatures matches.

The HMAC is computed here in one call (``hmac.digest``, OpenSSL's one-shot
HMAC) rather than through the reference implementation's ``Webhook.sign``,
which builds a Python ``hmac.HMAC`` object and round-trips the time through a
``datetime`` for every message: the worker signs once per run, and that was
half of this module's cost (issue #12, docs/benchmarks.md). The reference
implementation stays the oracle: tests/delivery/test_signing.py verifies every
signature with its ``Webhook.verify`` and compares with its ``Webhook.sign``
over generated secrets, ids, times and payloads.
"""

from __future__ import annotations

import base64
import functools
import hmac
import math
import secrets as _secrets
from collections.abc import Sequence
from datetime import UTC, datetime

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


def _payload_bytes(payload: bytes) -> bytes:
    if not isinstance(payload, bytes | bytearray | memoryview):
        raise TypeError("payload must be bytes (the exact bytes that will be sent)")
    payload = bytes(payload)
    try:
        # The reference implementation signs text, encoded as UTF-8: only bytes that are valid
        # UTF-8 have a signature a receiver using it can check (it decodes what it receives).
        payload.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError("payload must be valid UTF-8") from exc
    return payload


def _signature_header(secrets: Sequence[str], msg_id: str, unix_seconds: int, payload: bytes) -> str:
    if isinstance(secrets, str | bytes):
        raise TypeError("secrets must be a sequence of secrets, not a single string")
    if not secrets:
        raise ValueError("at least one signing secret is required")
    if not msg_id:
        raise ValueError("msg_id must not be empty")
    content = b"%s.%d.%s" % (str(msg_id).encode(), unix_seconds, payload)  # as the reference formats it
    return " ".join(
        "v1," + base64.b64encode(hmac.digest(_key(secret), content, "sha256")).decode("ascii") for secret in secrets
    )


@functools.lru_cache(maxsize=256)
def _key(secret: str) -> bytes:
    """The HMAC key of one secret, decoded once (a delivery signs once per run), as the reference
    implementation's `Webhook(secret)` decodes it: the base64 after an optional `whsec_`, padding
    optional; bytes are the key itself. Bounded; the secrets signed with are still chosen per
    message by the caller."""
    key = base64.b64decode(secret.removeprefix(SECRET_PREFIX) + "==") if isinstance(secret, str) else secret
    if not isinstance(key, bytes):
        raise TypeError("a signing secret must be text (or the key's bytes)")
    if not key:
        raise ValueError("a signing secret may not be empty")
    return key


def signature_header(secrets: Sequence[str], msg_id: str, timestamp: datetime, payload: bytes) -> str:
    """Value for the ``webhook-signature`` header: ``v1,<sig>`` per secret."""
    return _signature_header(secrets, msg_id, _unix_seconds(timestamp), _payload_bytes(payload))


def webhook_headers(*, secrets: Sequence[str], msg_id: str, timestamp: datetime, payload: bytes) -> dict[str, str]:
    """The three Standard Webhooks headers for one message.

    ``webhook-timestamp`` is the same integer second that was signed.
    """
    unix_seconds = _unix_seconds(timestamp)
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(unix_seconds),
        "webhook-signature": _signature_header(secrets, msg_id, unix_seconds, _payload_bytes(payload)),
    }
