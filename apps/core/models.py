"""Shared model bits: time-ordered UUID primary keys and tenant-scoped querysets."""

from django.db import models

from apps.core.ids import uuid7


class UUIDModel(models.Model):
    """UUIDv7 primary key (apps/core/ids.py): hard to guess in URLs, yet time-ordered so B-tree
    inserts stay local."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)

    class Meta:
        abstract = True


class TenantQuerySet(models.QuerySet):
    def for_tenant(self, tenant):
        return self.filter(tenant=tenant)


class IdempotencyRecord(models.Model):
    """The first response to a request made with an `Idempotency-Key`, replayed for repeats.

    Keys are per tenant and kept for 24 hours (older ones are ignored and may be purged).
    """

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE)
    key = models.CharField(max_length=255)
    request_hash = models.CharField(max_length=64)
    status_code = models.PositiveSmallIntegerField()
    response_body = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "key"], name="idempotency_unique_key")]

    def __str__(self) -> str:
        return self.key
