"""Sign test deliveries with the code Chime itself signs with (apps/delivery/signing.py)."""

import base64
import json
from datetime import UTC, datetime

from apps.delivery.signing import generate_signing_secret, webhook_headers


def secret() -> str:
    return generate_signing_secret()


def delivery(secrets, *, msg_id="run-1", body=None, at=None, extra=None) -> tuple[bytes, dict[str, str]]:
    """(raw body, headers) of one delivery as Chime's worker sends it."""
    raw = json.dumps(body if body is not None else {"type": "chime.run", "data": {"run_id": msg_id}}).encode()
    when = at or datetime.now(UTC)
    headers = webhook_headers(secrets=list(secrets), msg_id=msg_id, timestamp=when, payload=raw)
    headers.update({"Content-Type": "application/json", "Chime-Run-Id": msg_id, "Chime-Attempt": "1"})
    headers.update(extra or {})
    return raw, headers


def tampered_signature(headers: dict[str, str]) -> dict[str, str]:
    forged = base64.b64encode(b"x" * 32).decode()
    return {**headers, "webhook-signature": f"v1,{forged}"}
