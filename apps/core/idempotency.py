"""Idempotency keys for creates: the same key and body within 24 h returns the first response."""

import hashlib
import json
from collections.abc import Callable
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from .models import IdempotencyRecord

KEY_LIFETIME = timedelta(hours=24)
MAX_KEY_LENGTH = 255


class IdempotencyConflict(Exception):
    """The key was already used with a different request body."""


def request_fingerprint(payload) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def idempotent(*, tenant, key: str, payload, produce: Callable[[], tuple[int, dict]]) -> tuple[int, dict, bool]:
    """(status, body, replayed). `produce` runs at most once per (tenant, key) and body.

    Runs in one transaction with `produce`: if `produce` raises (say, a validation error), the
    key is not consumed. A concurrent request with the same key waits on the unique index and
    then replays the committed response.
    """
    fingerprint = request_fingerprint(payload)
    with transaction.atomic():
        IdempotencyRecord.objects.filter(tenant=tenant, key=key, created_at__lt=timezone.now() - KEY_LIFETIME).delete()
        try:
            with transaction.atomic():
                record = IdempotencyRecord.objects.create(
                    tenant=tenant, key=key, request_hash=fingerprint, status_code=0, response_body={}
                )
        except IntegrityError:
            existing = IdempotencyRecord.objects.get(tenant=tenant, key=key)
            if existing.request_hash != fingerprint:
                raise IdempotencyConflict(
                    "This Idempotency-Key was already used with a different request body."
                ) from None
            return existing.status_code, existing.response_body, True
        status, body = produce()
        record.status_code, record.response_body = status, body
        record.save(update_fields=["status_code", "response_body"])
    return status, body, False
