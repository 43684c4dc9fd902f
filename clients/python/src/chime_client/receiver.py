"""Receiving Chime's webhooks: verify Standard Webhooks signatures, deduplicate by ``webhook-id``.

Chime delivers at least once: a retry, a replay or (rarely) a worker dying after your answer sends
the same run again, always under the same ``webhook-id``. :class:`WebhookReceiver` turns that into
"the handler runs once per run": it verifies the signature and the timestamp, claims the id in a
:mod:`dedupe store <chime_client.dedupe>`, and only then calls the handler. A handler that fails
releases the claim, so Chime's retry runs it again; one that succeeds marks the id done, so a later
duplicate is acknowledged (2xx) without calling it.

The framework helpers (``chime_client.contrib.django``, ``.flask``, ``.starlette``) are thin
wrappers around :meth:`WebhookReceiver.gate` and :meth:`WebhookReceiver.finish`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .dedupe import BUSY, CLAIMED, DONE, DedupeStore

__all__ = [
    "DEFAULT_TOLERANCE_SECONDS",
    "InvalidSignature",
    "MalformedWebhook",
    "Rejection",
    "TimestampOutOfTolerance",
    "VerificationError",
    "Webhook",
    "WebhookReceiver",
    "sign",
    "verify",
]

DEFAULT_TOLERANCE_SECONDS = 300  # as the Standard Webhooks libraries: 5 minutes either way
SECRET_PREFIX = "whsec_"  # noqa: S105 - a prefix, not a secret


class VerificationError(Exception):
    """The request is not a valid Chime webhook. ``status`` is what to answer."""

    status = 401


class MalformedWebhook(VerificationError):
    """A Standard Webhooks header is missing or unreadable: not a webhook at all (400)."""

    status = 400


class InvalidSignature(VerificationError):
    """No signature in ``webhook-signature`` matches any of the secrets (401)."""


class TimestampOutOfTolerance(VerificationError):
    """``webhook-timestamp`` is too far from now: a replayed capture, or a badly wrong clock (401)."""


@dataclass(frozen=True)
class Webhook:
    """A verified delivery. ``id`` is the run id, the same on every attempt of the run."""

    id: str
    timestamp: int
    body: bytes
    headers: dict[str, str] = field(repr=False)

    def json(self) -> Any:
        """The body parsed as JSON (``None`` for an empty body, e.g. a GET job)."""
        return json.loads(self.body) if self.body else None

    @property
    def attempt(self) -> int | None:
        value = self.headers.get("chime-attempt")
        return int(value) if value and value.isdigit() else None

    @property
    def run_id(self) -> str | None:
        return self.headers.get("chime-run-id")

    @property
    def job_id(self) -> str | None:
        return self.headers.get("chime-job-id")


def _key(secret: str) -> bytes:
    raw = secret.removeprefix(SECRET_PREFIX)
    try:
        return base64.b64decode(raw, validate=True)
    except ValueError as exc:
        raise ValueError("a signing secret is 'whsec_' + base64 (GET /api/v1/signing-secret)") from exc


def _signature(key: bytes, msg_id: str, timestamp: str, body: bytes) -> bytes:
    signed = msg_id.encode() + b"." + timestamp.encode() + b"." + body
    return hmac.new(key, signed, hashlib.sha256).digest()


def _secrets(secrets: str | Iterable[str]) -> list[str]:
    listed = [secrets] if isinstance(secrets, str) else list(secrets)
    if not listed:
        raise ValueError("at least one signing secret is required")
    return listed


def sign(secrets: str | Sequence[str], msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three Standard Webhooks headers, as Chime sends them (for tests and local tools)."""
    stamp = str(int(timestamp))
    signatures = [
        "v1," + base64.b64encode(_signature(_key(s), msg_id, stamp, body)).decode() for s in _secrets(secrets)
    ]
    return {"webhook-id": msg_id, "webhook-timestamp": stamp, "webhook-signature": " ".join(signatures)}


def verify(
    body: bytes,
    headers: Mapping[str, str],
    secrets: str | Iterable[str],
    *,
    tolerance_seconds: float = DEFAULT_TOLERANCE_SECONDS,
    now: float | None = None,
) -> Webhook:
    """Check one delivery; return it as a :class:`Webhook` or raise a :class:`VerificationError`.

    ``body`` must be the raw bytes as received (before any JSON parsing). ``headers`` is any
    mapping; names are compared case-insensitively. ``secrets``: one or several (during a
    rotation, the old and the new one): the delivery passes if any ``v1,`` signature in the
    header matches any secret. The timestamp must be within ``tolerance_seconds`` of ``now``.
    """
    if not isinstance(body, bytes | bytearray | memoryview):
        raise TypeError("body must be the raw bytes of the request")
    body = bytes(body)
    lowered = {str(k).lower(): str(v) for k, v in headers.items()}
    msg_id = lowered.get("webhook-id", "")
    stamp = lowered.get("webhook-timestamp", "")
    header = lowered.get("webhook-signature", "")
    if not (msg_id and stamp and header):
        raise MalformedWebhook("missing webhook-id, webhook-timestamp or webhook-signature header")
    if not stamp.isdigit():
        raise MalformedWebhook("webhook-timestamp is not an integer number of seconds")
    current = time.time() if now is None else now
    if abs(current - int(stamp)) > tolerance_seconds:
        raise TimestampOutOfTolerance(f"webhook-timestamp is more than {tolerance_seconds:g}s from now")
    offered = []
    for part in header.split():
        version, _, value = part.partition(",")
        if version == "v1" and value:
            try:
                offered.append(base64.b64decode(value, validate=True))
            except ValueError:
                continue
    for secret in _secrets(secrets):
        expected = _signature(_key(secret), msg_id, stamp, body)
        if any(hmac.compare_digest(expected, candidate) for candidate in offered):
            return Webhook(id=msg_id, timestamp=int(stamp), body=body, headers=lowered)
    raise InvalidSignature("no signature matches the signing secret")


@dataclass(frozen=True)
class Rejection:
    """What to answer instead of calling the handler."""

    status: int
    message: str
    headers: dict[str, str] = field(default_factory=dict)


class WebhookReceiver:
    """Verification plus at-most-once handling on top of at-least-once delivery.

    ``secrets``: a secret, a list, or a callable returning either (read lazily on each request, so
    a rotated secret in settings or the environment is picked up). ``store``: where handled ids
    are kept (``None``: no deduplication). ``lease_seconds``: how long a claim blocks a concurrent
    duplicate while the handler runs (it answers 503 with Retry-After, so Chime retries later);
    ``keep_seconds``: how long a done id is remembered (Chime's retries and replays of a run come
    within days; the default is 7).
    """

    def __init__(
        self,
        secrets: str | Sequence[str] | Callable[[], str | Sequence[str]],
        *,
        store: DedupeStore | None = None,
        tolerance_seconds: float = DEFAULT_TOLERANCE_SECONDS,
        lease_seconds: float = 300,
        keep_seconds: float = 7 * 86400,
    ):
        self._secrets = secrets
        self.store = store
        self.tolerance_seconds = tolerance_seconds
        self.lease_seconds = lease_seconds
        self.keep_seconds = keep_seconds

    @property
    def secrets(self) -> list[str]:
        value = self._secrets() if callable(self._secrets) else self._secrets
        return _secrets(value)

    def verify(self, body: bytes, headers: Mapping[str, str]) -> Webhook:
        return verify(body, headers, self.secrets, tolerance_seconds=self.tolerance_seconds)

    def gate(self, body: bytes, headers: Mapping[str, str]) -> Webhook | Rejection:
        """Verify and claim. A :class:`Webhook`: call the handler, then :meth:`finish`. A
        :class:`Rejection`: answer it (401/400 for a bad request, 200 for a duplicate already
        handled, 503 for one being handled right now)."""
        try:
            webhook = self.verify(body, headers)
        except VerificationError as error:
            return Rejection(error.status, str(error))
        if self.store is None:
            return webhook
        state = self.store.claim(webhook.id, self.lease_seconds)
        if state == CLAIMED:
            return webhook
        if state == DONE:
            return Rejection(200, "duplicate: already handled")
        if state == BUSY:
            retry = str(max(1, int(min(self.lease_seconds, 60))))
            return Rejection(503, "duplicate: being handled", {"Retry-After": retry})
        raise RuntimeError(f"dedupe store answered {state!r}")

    def finish(self, webhook: Webhook, *, ok: bool) -> None:
        """After the handler: ``ok`` marks the id done; otherwise the claim is released so the
        retry Chime sends (the handler failed, so the answer was not 2xx) runs the handler again."""
        if self.store is None:
            return
        if ok:
            self.store.complete(webhook.id, self.keep_seconds)
        else:
            self.store.release(webhook.id)
