"""The index of run archives: one row per gzip JSON-lines file written to the archive storage."""

from django.db import models

from apps.core.models import TenantQuerySet, UUIDModel
from apps.tenants.models import Tenant


class ArchiveKind(models.TextChoices):
    PRUNE = "prune"  # runs that left the hot store: the file is their only copy
    EXPORT = "export"  # a copy of a date range; the runs stay


class RunArchive(UUIDModel):
    """One archive file of one tenant's runs (with their attempts) created on one UTC day.

    A day may have several parts: each prune batch writes its own part, and a later pass adds
    parts after the existing ones, so a file is never rewritten (nothing archived is lost).
    The row is written in the same transaction that deletes the archived runs: a row exists
    exactly when its runs left the table (kind prune)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="run_archives")
    kind = models.CharField(max_length=8, choices=ArchiveKind.choices)
    day = models.DateField(help_text="The UTC day the runs were created on.")
    part = models.PositiveIntegerField()
    path = models.CharField(max_length=500, help_text="Name in the chime_archive storage.")
    run_count = models.PositiveIntegerField()
    attempt_count = models.PositiveIntegerField()
    bytes = models.PositiveBigIntegerField()
    sha256 = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "kind", "day", "part"], name="runarchive_unique_part"),
        ]
        indexes = [models.Index(fields=["tenant", "-id"], name="runarchive_tenant_idx")]

    def __str__(self) -> str:
        return self.path
