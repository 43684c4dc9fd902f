"""A bulk operation of one tenant (docs/architecture.md#bulk-operations).

The operation's *state*, *result* and *error* are Celery's, stored by django-celery-results in
its TaskResult row (`task_id`); this row holds what Celery does not know: whose operation it is,
what it was asked, and how far it got. Progress lives here, not in the task's state meta: it is
written in the same transaction as each chunk's effect, so "a chunk committed" and "the progress
says so" can never disagree, and a re-delivered task resumes from `cursor`.
"""

from django.db import models

from apps.core.models import TenantQuerySet, UUIDModel
from apps.tenants.models import Tenant


class OperationKind(models.TextChoices):
    REPLAY = "replay"  # every dead letter matching a filter
    BACKFILL = "backfill"  # a long range of one job
    EXPORT = "export"  # a date range of run history, archived
    PRUNE = "prune"  # the tenant's history past its retention


# lease_owner of an operation the sweep sent again: whichever copy of its message comes first claims it.
REQUEUED = "requeued"


class Operation(UUIDModel):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="operations", db_index=False)
    kind = models.CharField(max_length=16, choices=OperationKind.choices)
    params = models.JSONField(default=dict, blank=True)
    idempotency_key = models.CharField(max_length=255, blank=True)
    created_by = models.CharField(max_length=200, blank=True, help_text="api-key:<prefix> or user:<username>")
    task_id = models.CharField(max_length=255, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Progress, committed with each chunk (see the module docstring).
    done = models.PositiveIntegerField(default=0)
    total = models.PositiveIntegerField(null=True, blank=True, help_text="null until counted")
    cursor = models.CharField(max_length=64, blank=True, help_text="where the next chunk starts")
    counts = models.JSONField(default=dict, blank=True, help_text="the kind's tallies, the task's result")
    # Which worker runs it, until when: a worker killed mid-operation lets it lapse and the ops
    # worker's sweep sends the operation again (apps/operations/recovery.py).
    lease_owner = models.CharField(max_length=200, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)

    objects = TenantQuerySet.as_manager()

    class Meta:
        indexes = [
            models.Index(fields=["tenant", "-id"], name="operation_tenant_id_idx"),
            models.Index(
                fields=["lease_expires_at"], name="operation_unfinished_idx", condition=models.Q(finished_at=None)
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.id}"
