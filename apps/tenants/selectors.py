"""Reads for tenants and their credentials."""

from datetime import timedelta

from django.utils import timezone

from .models import ApiKey, SigningSecret, Tenant
from .services import hash_api_key

# Writing last_used_at on every request would turn each API read into a write.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def api_key_authenticate(raw_key: str) -> ApiKey | None:
    """The active key matching `raw_key`, with its tenant; records when it was last used."""
    api_key = (
        ApiKey.objects.select_related("tenant").filter(key_hash=hash_api_key(raw_key), revoked_at__isnull=True).first()
    )
    if api_key is not None:
        now = timezone.now()
        if api_key.last_used_at is None or now - api_key.last_used_at > LAST_USED_RESOLUTION:
            ApiKey.objects.filter(pk=api_key.pk).update(last_used_at=now)
            api_key.last_used_at = now
    return api_key


def signing_secrets_valid(*, tenant: Tenant) -> list[str]:
    """The secrets every delivery is signed with: the current one first, then unexpired old ones."""
    now = timezone.now()
    rows = SigningSecret.objects.for_tenant(tenant).filter(expires_at__isnull=True) | SigningSecret.objects.for_tenant(
        tenant
    ).filter(expires_at__gt=now)
    return [s.secret for s in sorted(rows, key=lambda s: (s.expires_at is not None, -s.created_at.timestamp()))]


def signing_secret_current(*, tenant: Tenant) -> SigningSecret:
    return SigningSecret.objects.for_tenant(tenant).get(expires_at__isnull=True)


def tenant_by_slug(slug: str) -> Tenant | None:
    return Tenant.objects.filter(slug=slug).first()


def api_key_list(*, tenant: Tenant):
    return ApiKey.objects.for_tenant(tenant).order_by("-created_at")


def api_key_get(*, tenant: Tenant, api_key_id) -> ApiKey:
    return ApiKey.objects.for_tenant(tenant).get(pk=api_key_id)
