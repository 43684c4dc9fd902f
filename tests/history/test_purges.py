"""Idempotency records past their lifetime and long-dead scheduler nodes are purged; live ones and
nodes still named by a lease stay."""

from datetime import timedelta

from django.utils import timezone

from apps.core.idempotency import idempotent
from apps.core.models import IdempotencyRecord
from apps.history import services
from apps.scheduler.models import SchedulerLease, SchedulerNode


def test_expired_idempotency_records_are_purged_live_ones_kept(tenant, other_tenant, settings):
    settings.CHIME_PRUNE_BATCH_SIZE = 3  # several primary-key ranges
    for n in range(8):
        idempotent(tenant=tenant if n % 2 else other_tenant, key=f"k{n}", payload={"n": n}, produce=lambda: (201, {}))
    now = timezone.now()
    old = list(IdempotencyRecord.objects.order_by("pk").values_list("pk", flat=True))[:5]
    IdempotencyRecord.objects.filter(pk__in=old).update(created_at=now - timedelta(hours=25))

    assert services.purge_idempotency_records(now=now) == 5

    assert IdempotencyRecord.objects.count() == 3
    assert not IdempotencyRecord.objects.filter(pk__in=old).exists()
    assert services.purge_idempotency_records(now=now) == 0


def test_stale_scheduler_nodes_go_unless_a_lease_names_them(db):
    now = timezone.now()
    for owner, age in (("live", timedelta(seconds=5)), ("dead", timedelta(days=3)), ("holder", timedelta(days=3))):
        SchedulerNode.objects.create(owner=owner, heartbeat_at=now - age, started_at=now - age)
    SchedulerLease.objects.create(partition=0, owner="holder", expires_at=now - timedelta(days=3))

    assert services.purge_stale_scheduler_nodes(now=now) == 1

    assert set(SchedulerNode.objects.values_list("owner", flat=True)) == {"live", "holder"}


def test_finished_operations_go_with_their_celery_results_after_their_retention(tenant, settings):
    """Operations (apps/operations) and the TaskResult rows holding their state would grow forever:
    finished ones past CHIME_OPERATION_RETENTION_DAYS go, newer and unfinished ones stay."""
    from django_celery_results.models import TaskResult

    from apps.operations.models import Operation

    settings.CHIME_OPERATION_RETENTION_DAYS = 30
    now = timezone.now()
    made = {}
    for name, finished in (("old", now - timedelta(days=31)), ("recent", now - timedelta(days=2)), ("open", None)):
        made[name] = Operation.objects.create(
            tenant=tenant, kind="replay", task_id=f"task-{name}", finished_at=finished
        )
        TaskResult.objects.create(task_id=f"task-{name}", status="SUCCESS" if finished else "STARTED")
    Operation.objects.filter(pk=made["open"].pk).update(created_at=now - timedelta(days=90))  # old, not finished

    assert services.purge_finished_operations(now=now) == 1

    assert set(Operation.objects.values_list("task_id", flat=True)) == {"task-recent", "task-open"}
    assert set(TaskResult.objects.values_list("task_id", flat=True)) == {"task-recent", "task-open"}
    assert services.purge_finished_operations(now=now) == 0
