"""Header secrecy: a job's target headers may hold credentials (docs/api.md#header-secrecy).

Three rules, one home:

- **At rest**, every target header value is encrypted (Fernet, `EncryptedHeadersField`): a value
  the name rule below misses is still never in clear text in the database or a dump. The worker
  reads `definition.target_headers` as plain text, as before.
- **Shown**, a header is secret if the tenant marked it (`JobDefinition.secret_header_names`) or
  its name looks like a credential (`is_secret_header`); its value is `REDACTED` in the API, in the
  dashboard, and in stored attempts (`RunAttempt.request_headers`). Viewers see no header values.
- **Sent back**, `REDACTED` as a value means "keep the stored one" (`restore_redacted`), so a PATCH
  or a dashboard edit of a job shown redacted does not overwrite its credential with the
  placeholder; unless the target's host changes: a credential is not sent to a new host unless its
  value is given again.

Keys: `CHIME_FIELD_ENCRYPTION_KEYS` (Fernet keys; the first encrypts, all decrypt, so a new key is
put first and an old one removed once `manage.py rotate_field_keys` has re-encrypted every job);
without it, a key derived from `SECRET_KEY`.
"""

import base64
import hashlib
import logging
from functools import lru_cache
from urllib.parse import urlsplit

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import models

from .targets import RESERVED_HEADERS

logger = logging.getLogger(__name__)

REDACTED = "<redacted>"
# Names that carry credentials by convention (compared lower-case).
SECRET_HEADER_NAMES = frozenset({"authorization", "proxy-authorization", "cookie", "x-api-key", "api-key"})
# A name containing any of these (lower-case) is treated as secret too: over-redacting a harmless
# header costs a click, under-redacting a credential leaks it.
SECRET_NAME_PARTS = (
    "auth",
    "token",
    "secret",
    "key",
    "password",
    "passwd",
    "passphrase",
    "credential",
    "session",
    "signature",
    "cookie",
    "private",
    "jwt",
    "bearer",
)
ENCRYPTED_PREFIX = "fernet:"
# Set by Chime on every delivery (a job cannot set them): ids and times, no credential.
CHIME_SET_HEADERS = RESERVED_HEADERS - {"webhook-signature"}


def is_secret_header(name: str, marked=()) -> bool:
    return _is_secret(name.lower(), {m.lower() for m in marked})


def _is_secret(lower: str, marked_lower: set) -> bool:
    if lower in CHIME_SET_HEADERS:
        return False
    return _secret_by_name(lower) or lower in marked_lower


@lru_cache(maxsize=4096)
def _secret_by_name(lower: str) -> bool:
    """Whether a (lower-case) header name is secret by its name alone: a pure function of the
    name, remembered because the worker asks it for every header of every attempt it records
    (the scan of SECRET_NAME_PARTS was ~1 % of a worker process's CPU in a spike, issue #12).
    Bounded: names are the tenants' choice."""
    return lower in SECRET_HEADER_NAMES or any(part in lower for part in SECRET_NAME_PARTS)


def redact_headers(headers: dict, marked=()) -> dict[str, str]:
    """The headers as they may be shown: secret values replaced by REDACTED."""
    marked_lower = {m.lower() for m in marked}  # once per call, not per header: the worker redacts every attempt's
    return {
        name: REDACTED if _is_secret(name.lower(), marked_lower) else value for name, value in (headers or {}).items()
    }


def visible_headers(definition) -> dict[str, str]:
    """A job's target headers as the API and the dashboard show them to those who may see values."""
    return redact_headers(definition.target_headers, definition.secret_header_names)


def plain_headers(definition) -> dict[str, str]:
    """The headers to send, in clear: what apps/delivery/services.build_request reads."""
    return dict(definition.target_headers)


class SecretHeaderError(ValueError):
    """Secret-header input that cannot be taken (an unknown name, a placeholder with nothing
    stored); the message is for the user."""


def marked_names(names, headers: dict) -> list[str]:
    """The names a tenant marks secret, spelled as `headers` spells them, each once. A name that
    is not among the headers is refused (a typo would leave a credential unmarked)."""
    by_lower = {name.lower(): name for name in headers}
    unknown = [name for name in names if name.lower() not in by_lower]
    if unknown:
        raise SecretHeaderError(f"'{unknown[0]}' is not one of the headers.")
    return list(dict.fromkeys(by_lower[name.lower()] for name in names))


def restore_redacted(headers: dict[str, str], *, job, url: str) -> dict[str, str]:
    """`headers` with each REDACTED value replaced by the value `job` has stored for that header
    (names compared case-insensitively). `job` is None on create: nothing is stored then."""
    placeholders = [name for name, value in headers.items() if value == REDACTED]
    if not placeholders:
        return headers
    stored = {name.lower(): value for name, value in (job.target_headers if job is not None else {}).items()}
    missing = [name for name in placeholders if name.lower() not in stored]
    if missing:
        raise SecretHeaderError(
            f"'{missing[0]}' has the placeholder {REDACTED} as its value but no stored value: send the value."
        )
    if urlsplit(url).hostname != urlsplit(job.target_url).hostname:
        raise SecretHeaderError(
            f"The target's host changed: send the values of {', '.join(placeholders)} again "
            f"(a stored credential is not sent to a new host)."
        )
    return {name: stored[name.lower()] if value == REDACTED else value for name, value in headers.items()}


# -- encryption at rest


def _derived_key() -> bytes:
    digest = hashlib.sha256(b"chime.field-encryption:" + settings.SECRET_KEY.encode()).digest()
    return base64.urlsafe_b64encode(digest)


@lru_cache(maxsize=4)
def _fernet_for(keys: tuple[str, ...], derived: bytes) -> MultiFernet:
    fernets = []
    for number, key in enumerate(keys, start=1):
        try:
            fernets.append(Fernet(key.encode()))
        except ValueError as error:
            raise ImproperlyConfigured(
                f"CHIME_FIELD_ENCRYPTION_KEYS: key {number} is not a Fernet key (32 url-safe base64-encoded bytes)."
            ) from error
    return MultiFernet(fernets or [Fernet(derived)])


def _key_config() -> tuple[tuple[str, ...], bytes]:
    keys = tuple(key.strip() for key in settings.CHIME_FIELD_ENCRYPTION_KEYS if key.strip())
    return keys, b"" if keys else _derived_key()


def fernet() -> MultiFernet:
    return _fernet_for(*_key_config())


@lru_cache(maxsize=8192)
def _decrypt_token(token: str, keys: tuple[str, ...], derived: bytes) -> str:
    """Cached: a worker loads the same definitions again and again, and a Fernet decryption costs
    tens of microseconds; a token always opens to the same text under the same keys."""
    return _fernet_for(keys, derived).decrypt(token.encode()).decode()


def encrypt_value(value: str) -> str:
    return ENCRYPTED_PREFIX + fernet().encrypt(value.encode()).decode()


def decrypt_value(stored: str) -> str:
    """The clear value; a value without the prefix is clear text stored before encryption. One that
    no configured key opens is returned as stored (and logged), so a missing key breaks the
    requests that need it, never the pages that list jobs."""
    if not isinstance(stored, str) or not stored.startswith(ENCRYPTED_PREFIX):
        return stored
    try:
        return _decrypt_token(stored.removeprefix(ENCRYPTED_PREFIX), *_key_config())
    except InvalidToken:
        logger.error("a target header value cannot be decrypted with any key of CHIME_FIELD_ENCRYPTION_KEYS")
        return stored


def rotate_value(stored: str) -> str:
    """The value encrypted again with the first key (MultiFernet.rotate); clear text gets encrypted."""
    if isinstance(stored, str) and stored.startswith(ENCRYPTED_PREFIX):
        return ENCRYPTED_PREFIX + fernet().rotate(stored.removeprefix(ENCRYPTED_PREFIX).encode()).decode()
    return encrypt_value(stored)


class EncryptedHeadersField(models.JSONField):
    """A JSON object of header name -> value whose values are stored encrypted; in Python the
    values are clear text. Names stay readable (they are shown to viewers, and are no secret)."""

    def from_db_value(self, value, expression, connection):
        value = super().from_db_value(value, expression, connection)
        if isinstance(value, dict):
            return {name: decrypt_value(item) for name, item in value.items()}
        return value

    def get_prep_value(self, value):
        if isinstance(value, dict):
            value = {name: encrypt_value(item) if isinstance(item, str) else item for name, item in value.items()}
        return super().get_prep_value(value)


def reencrypt_target_headers() -> tuple[int, int]:
    """Encrypt every job's header values again with the first key (after a key was put first in
    CHIME_FIELD_ENCRYPTION_KEYS). Returns (jobs re-encrypted, jobs skipped because a value opens
    with no configured key: they keep their stored value, and are logged)."""
    from .models import JobDefinition

    done = skipped = 0
    rows = JobDefinition.objects.exclude(target_headers={}).values_list("id", "target_headers")
    for job_id, headers in rows.iterator():
        if any(isinstance(v, str) and v.startswith(ENCRYPTED_PREFIX) for v in headers.values()):
            logger.error("job %s: a header value opens with no configured key; left as stored", job_id)
            skipped += 1
            continue
        JobDefinition.objects.filter(id=job_id).update(target_headers=headers)
        done += 1
    return done, skipped
