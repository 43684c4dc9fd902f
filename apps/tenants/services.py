"""Writes for tenants, API keys and signing secrets."""

import hashlib
import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from apps.delivery.signing import generate_signing_secret

from . import quotas
from .models import ApiKey, SigningSecret, Tenant

API_KEY_PREFIX = "chime_"


def hash_api_key(raw_key: str) -> str:
    return hashlib.sha256(raw_key.encode()).hexdigest()


@transaction.atomic
def tenant_create(*, slug: str, name: str = "") -> Tenant:
    tenant = Tenant.objects.create(slug=slug, name=name or slug)
    SigningSecret.objects.create(tenant=tenant, secret=generate_signing_secret())
    return tenant


@dataclass(frozen=True)
class CreatedApiKey:
    api_key: ApiKey
    raw_key: str  # shown to the user once, never stored


@transaction.atomic
def api_key_create(*, tenant: Tenant, name: str = "") -> CreatedApiKey:
    """Raises QuotaExceeded (403) when the tenant holds CHIME_QUOTA_MAX_API_KEYS active keys."""
    quotas.check_api_key_slot(tenant.pk)
    visible = secrets.token_hex(4)
    raw_key = f"{API_KEY_PREFIX}{visible}_{secrets.token_urlsafe(30)}"
    api_key = ApiKey.objects.create(
        tenant=tenant, name=name, prefix=f"{API_KEY_PREFIX}{visible}", key_hash=hash_api_key(raw_key)
    )
    return CreatedApiKey(api_key=api_key, raw_key=raw_key)


def api_key_revoke(*, api_key: ApiKey) -> None:
    ApiKey.objects.filter(pk=api_key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())


ROTATION_OVERLAP = timedelta(hours=24)


@transaction.atomic
def signing_secret_rotate(*, tenant: Tenant) -> SigningSecret:
    """Make a new current secret; the old one stays valid (deliveries carry both signatures) for
    24 hours so receivers can switch without dropping a webhook."""
    now = timezone.now()
    SigningSecret.objects.select_for_update().filter(tenant=tenant, expires_at__isnull=True).update(
        expires_at=now + ROTATION_OVERLAP
    )
    return SigningSecret.objects.create(tenant=tenant, secret=generate_signing_secret())
