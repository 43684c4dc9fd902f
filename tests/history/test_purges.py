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
