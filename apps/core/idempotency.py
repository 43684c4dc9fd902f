"""Idempotency keys for creates: the same key and body within 24 h returns the first response."""

import hashlib
import json
from collections.abc import Callable
from datetime import timedelta

from django.db import IntegrityError, connection, transaction
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
        record_id = _claim(tenant.pk, key, fingerprint)
        if record_id is None:
            existing = IdempotencyRecord.objects.get(tenant=tenant, key=key)
            if existing.request_hash != fingerprint:
                raise IdempotencyConflict("This Idempotency-Key was already used with a different request body.")
            return existing.status_code, existing.response_body, True
        status, body = produce()
        IdempotencyRecord.objects.filter(pk=record_id).update(status_code=status, response_body=body)
    return status, body, False


# Take the key, or take over a record older than KEY_LIFETIME, in one statement: no DELETE of the
# expired record first and no savepoint around an insert that may collide (three round trips
# fewer per create with a key). A concurrent insert of the same key makes this wait for that
# transaction: committed, its live record is kept (no row returned: replay it); rolled back, ours
# goes in.
_CLAIM_SQL = """
INSERT INTO core_idempotencyrecord AS r (tenant_id, key, request_hash, status_code, response_body, created_at)
VALUES (%s, %s, %s, 0, '{}', now())
ON CONFLICT (tenant_id, key) DO UPDATE
    SET request_hash = EXCLUDED.request_hash, status_code = 0, response_body = '{}', created_at = now()
    WHERE r.created_at < now() - %s
RETURNING r.id
"""


def _claim(tenant_id, key: str, fingerprint: str) -> int | None:
    """The id of a fresh record for (tenant, key) this transaction now holds, or None when a live
    record (younger than KEY_LIFETIME) has the key."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(_CLAIM_SQL, [tenant_id, key, fingerprint, KEY_LIFETIME])
            row = cursor.fetchone()
        return row[0] if row else None
    IdempotencyRecord.objects.filter(
        tenant_id=tenant_id, key=key, created_at__lt=timezone.now() - KEY_LIFETIME
    ).delete()
    try:
        with transaction.atomic():
            record = IdempotencyRecord.objects.create(
                tenant_id=tenant_id, key=key, request_hash=fingerprint, status_code=0, response_body={}
            )
    except IntegrityError:
        return None
    return record.pk
