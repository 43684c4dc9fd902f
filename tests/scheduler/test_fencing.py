"""Release under faults: the fence is the lease at the moment of the write, and runs whose
messages an empty broker lost are published again. Real PostgreSQL and Redis."""

import base64
import json
import time
from datetime import timedelta

import psycopg
import pytest
import redis
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from apps.jobs.models import JobRun, RunStatus
from apps.scheduler.leases import LeaseKeeper, ensure_lease_rows
from apps.scheduler.services import release_due_runs, republish_after_broker_loss
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def due_runs(job, count, *, status=RunStatus.SCHEDULED):
    now = timezone.now()
    return JobRun.objects.bulk_create(
        JobRun(
            tenant=job.tenant,
            definition=job,
            partition=job.partition,
            priority=job.priority,
            scheduled_for=now - timedelta(seconds=60 - i),
            available_at=now - timedelta(seconds=60 - i),
            status=status,
            queued_at=now if status == RunStatus.QUEUED else None,
        )
        for i in range(count)
    )


@pytest.fixture
def broker(redis_required):
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.flushdb()
    yield client
    client.flushdb()


def published_ids(broker) -> list[str]:
    ids = []
    for queue in ("runs.high", "runs.default", "runs.low"):
        for raw in broker.lrange(queue, 0, -1):
            ids += json.loads(base64.b64decode(json.loads(raw)["body"]))[0][0]
    return sorted(ids)


def test_a_lease_that_expired_during_the_transaction_releases_nothing(tenant, broker):
    """The test runs inside one transaction, whose now() is frozen at its start, as it was for a
    scheduler stopped (SIGSTOP) in the middle of its release: the fence must read the clock."""
    ensure_lease_rows()
    job = JobFactory(tenant=tenant)
    leases = LeaseKeeper(candidates=[job.partition], pinned=True)
    leases.refresh()
    assert job.partition in leases.held
    due_runs(job, 3)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE scheduler_schedulerlease SET expires_at = clock_timestamp() + interval '1 second' "
            "WHERE partition = %s",
            [job.partition],
        )
    time.sleep(1.5)  # the lease runs out while this transaction (now()) stands still
    assert release_due_runs(leases=leases, now=timezone.now(), batch_size=100) == 0
    assert set(JobRun.objects.values_list("status", flat=True)) == {RunStatus.SCHEDULED}
    assert published_ids(broker) == []


@pytest.mark.django_db(transaction=True)
def test_a_release_in_progress_locks_no_lease_row(tenant, broker):
    """A scheduler stalled inside its release must not keep the others from taking over: while
    the release's transaction is open, another session can lock the lease row at once (a
    takeover's SKIP LOCKED would otherwise skip it for as long as the stall lasts)."""
    ensure_lease_rows()
    job = JobFactory(tenant=tenant)
    leases = LeaseKeeper(candidates=[job.partition], pinned=True)
    leases.refresh()
    due_runs(job, 2)
    db = connection.settings_dict
    with transaction.atomic():  # hold the release's transaction open, as a stalled process would
        assert release_due_runs(leases=leases, now=timezone.now(), batch_size=100) == 2
        with psycopg.connect(
            dbname=db["NAME"], host=db["HOST"] or "127.0.0.1", port=db["PORT"] or 5432, user=db["USER"]
        ) as other:
            row = other.execute(
                "SELECT owner FROM scheduler_schedulerlease WHERE partition = %s FOR UPDATE NOWAIT", [job.partition]
            ).fetchone()
            assert row == (leases.owner,)


def test_runs_an_empty_broker_lost_are_published_again_once(tenant, broker):
    ensure_lease_rows()
    job = JobFactory(tenant=tenant)
    leases = LeaseKeeper(candidates=[job.partition], pinned=True)
    leases.refresh()
    runs = due_runs(job, 4)
    assert republish_after_broker_loss(partitions=leases.partitions, now=timezone.now(), batch_size=100) == 0
    assert broker.exists("chime:broker-epoch"), "the first look at an empty broker sets its epoch"
    assert release_due_runs(leases=leases, now=timezone.now(), batch_size=100) == 4
    assert published_ids(broker) == sorted(str(r.id) for r in runs)
    # A broker that keeps its data keeps its epoch: nothing is published twice.
    assert republish_after_broker_loss(partitions=leases.partitions, now=timezone.now(), batch_size=100) == 0

    broker.flushdb()  # Redis restarted without persistence: every message is gone
    time.sleep(0.01)
    assert published_ids(broker) == []
    assert republish_after_broker_loss(partitions=leases.partitions, now=timezone.now(), batch_size=100) == 4
    assert published_ids(broker) == sorted(str(r.id) for r in runs)
    assert set(JobRun.objects.values_list("status", flat=True)) == {RunStatus.QUEUED}
    assert republish_after_broker_loss(partitions=leases.partitions, now=timezone.now(), batch_size=100) == 0
    assert len(published_ids(broker)) == 4, "published again once, not on every sweep"
