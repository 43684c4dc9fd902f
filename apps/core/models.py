"""Shared model bits: time-ordered UUID primary keys and tenant-scoped querysets."""

from django.db import models
from uuid6 import uuid7


class UUIDModel(models.Model):
    """UUIDv7 primary key: unguessable in URLs, yet time-ordered so B-tree inserts stay local."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)

    class Meta:
        abstract = True


class TenantQuerySet(models.QuerySet):
    def for_tenant(self, tenant):
        return self.filter(tenant=tenant)
