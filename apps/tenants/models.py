from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models

from apps.core.models import TenantQuerySet, UUIDModel


class Tenant(UUIDModel):
    slug = models.SlugField(max_length=50, unique=True)
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.slug


class Role(models.TextChoices):
    OWNER = "owner", "Owner"
    ADMIN = "admin", "Admin"
    VIEWER = "viewer", "Viewer"


class Membership(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantQuerySet.as_manager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "tenant"], name="membership_unique_user_tenant")]

    def __str__(self) -> str:
        return f"{self.user} @ {self.tenant} ({self.role})"


class ApiKey(UUIDModel):
    """A tenant's API key. Only a SHA-256 of the raw key is stored; the raw key is shown once.

    Keys carry 240 bits of randomness, so a fast hash is enough (nothing to brute-force), and it
    lets authentication be one indexed lookup.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=16, db_index=True)
    key_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = TenantQuerySet.as_manager()

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.tenant})"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


class SigningSecret(UUIDModel):
    """A tenant's webhook signing secret (`whsec_...`).

    The current secret has `expires_at` NULL. Rotation (docs/api.md) gives the old one an expiry,
    and until then every delivery is signed with both.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="signing_secrets")
    secret = models.CharField(max_length=100)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)

    objects = TenantQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant"], condition=models.Q(expires_at__isnull=True), name="signing_secret_one_current"
            )
        ]


class TenantLimits(models.Model):
    """Per-tenant overrides of the quotas in settings (CHIME_QUOTA_*, CHIME_API_RATE_LIMIT,
    CHIME_RUN_RETENTION_DAYS), set by
    staff in the admin. A blank field means the setting's default; apps/tenants/quotas.py is the one
    place that combines them (`effective_limits`)."""

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, primary_key=True, related_name="limits")
    max_jobs = models.PositiveIntegerField(null=True, blank=True, help_text="Jobs that are not deleted or completed.")
    max_api_keys = models.PositiveIntegerField(null=True, blank=True, help_text="API keys not revoked.")
    max_backfill_runs = models.PositiveIntegerField(null=True, blank=True, help_text="Runs one backfill may create.")
    triggers_per_minute = models.PositiveIntegerField(null=True, blank=True, help_text="Manual triggers, all jobs.")
    min_retry_backoff_seconds = models.PositiveIntegerField(null=True, blank=True)
    max_retry_attempts = models.PositiveIntegerField(null=True, blank=True)
    max_live_connections = models.PositiveIntegerField(null=True, blank=True, help_text="Dashboard WebSockets.")
    run_retention_days = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Days finished runs stay in the run history before they are archived and deleted.",
    )
    api_rate_limit = models.CharField(
        max_length=32, blank=True, help_text="API requests of the whole tenant, e.g. '600/min' (all keys together)."
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "tenant limits"
        verbose_name_plural = "tenant limits"

    def __str__(self) -> str:
        return f"limits of {self.tenant_id}"

    def clean(self):
        from django.core.exceptions import ValidationError

        from .ratelimit import Rate

        if self.api_rate_limit:
            try:
                Rate.parse(self.api_rate_limit)
            except ValueError as error:
                raise ValidationError({"api_rate_limit": str(error)}) from error
