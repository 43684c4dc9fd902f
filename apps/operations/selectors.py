"""Reads of operations, each scoped to a tenant, with their Celery state from django-celery-results."""

import json
from dataclasses import dataclass

from django.http import Http404
from django_celery_results.models import TaskResult

from .models import Operation

# Celery's states as the API names them. No TaskResult row yet: the task waits in the queue.
STATES = {"PENDING": "pending", "RECEIVED": "pending", "STARTED": "running", "RETRY": "running",
          "SUCCESS": "succeeded", "FAILURE": "failed", "REVOKED": "failed"}  # fmt: skip


@dataclass
class OperationView:
    """An operation with what its TaskResult says (state, result, error)."""

    operation: Operation
    task: TaskResult | None

    def __getattr__(self, name):
        return getattr(self.operation, name)

    @property
    def state(self) -> str:
        return STATES.get(self.task.status, "running") if self.task else "pending"

    def _payload(self):
        if self.task is None or not self.task.result:
            return None
        try:
            return json.loads(self.task.result)
        except ValueError:
            return None

    @property
    def result(self) -> dict | None:
        payload = self._payload()
        return payload if self.state == "succeeded" and isinstance(payload, dict) else None

    @property
    def error(self) -> str | None:
        if self.state != "failed":
            return None
        payload = self._payload() or {}
        message = payload.get("exc_message") if isinstance(payload, dict) else None
        if isinstance(message, list | tuple):
            message = " ".join(str(part) for part in message)
        return str(message or self.task.status)

    @property
    def percent(self) -> int:
        if self.state == "succeeded":
            return 100
        if not self.total:
            return 0
        return min(100, self.done * 100 // self.total)


def with_tasks(operations) -> list[OperationView]:
    """Each operation with its TaskResult, in one query for the lot."""
    operations = list(operations)
    tasks = {t.task_id: t for t in TaskResult.objects.filter(task_id__in=[o.task_id for o in operations])}
    return [OperationView(o, tasks.get(o.task_id)) for o in operations]


def operation_list(*, tenant):
    return Operation.objects.filter(tenant=tenant)


def operation_get(*, tenant, operation_id) -> OperationView:
    """Another tenant's operation is not found (404), as a missing one."""
    operation = Operation.objects.filter(tenant=tenant, pk=operation_id).first()
    if operation is None:
        raise Http404("No such operation.")
    return with_tasks([operation])[0]
