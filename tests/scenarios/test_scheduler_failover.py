"""Kill one of two schedulers in the middle of a spike: nothing is lost, nothing is doubled."""

import re
import signal
import time
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from apps.core.ids import uuid7
from apps.jobs.models import JobDefinition, JobRun, RunStatus, ScheduleType, partition_for
from tests.support.processes import start_scheduler, start_worker, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

SPIKE = 3000


def create_spike(tenant, url: str, at: datetime) -> list:
    jobs = []
    for i in range(SPIKE):
        job_id = uuid7()
        jobs.append(
            JobDefinition(
                id=job_id,
                partition=partition_for(job_id),
                tenant=tenant,
                name=f"spike-{i}",
                schedule_type=ScheduleType.ONCE,
                run_at=at,
                next_fire_at=at,
                target_url=f"{url}/spike",
            )
        )
    JobDefinition.objects.bulk_create(jobs, batch_size=1000)
    return [job.id for job in jobs]


@pytest.mark.timeout(240)
def test_sigkill_of_one_scheduler_mid_spike_loses_no_occurrence(tenant, receiver, redis_required):
    fire_at = datetime.now(UTC) + timedelta(seconds=12)
    job_ids = create_spike(tenant, receiver.url, fire_at)

    env = {"CHIME_REQUEUE_AFTER_SECONDS": "5", "CHIME_SWEEP_INTERVAL_SECONDS": "1", "CHIME_SCHEDULER_BATCH_SIZE": "200"}
    worker = start_worker(concurrency=2)
    victim = start_scheduler(name="scheduler-victim", **env)
    survivor = start_scheduler(name="scheduler-survivor", **env)
    try:
        # Unpinned schedulers share the 64 partitions between them.
        wait_until(lambda: "now holding 32 partitions" in survivor.log(), timeout=20, message="partitions shared")
        wait_until(lambda: "materialized" in victim.log(), timeout=30, message="victim working on the spike")
        while datetime.now(UTC) < fire_at:
            time.sleep(0.05)
        victim.kill(signal.SIGKILL)
        killed_at = time.monotonic()

        wait_until(lambda: "now holding 64 partitions" in survivor.log(), timeout=20, message="takeover")
        takeover_seconds = time.monotonic() - killed_at
        wait_until(
            lambda: JobRun.objects.filter(status=RunStatus.SUCCEEDED).count() >= SPIKE,
            timeout=120,
            message="every occurrence delivered",
        )
    finally:
        victim.stop()
        survivor.stop()
        worker.stop()

    assert takeover_seconds <= 15, f"takeover took {takeover_seconds:.1f}s"
    assert re.search(r"materialized \d+ definitions", victim.log()), "the victim really took part"
    runs = Counter(JobRun.objects.filter(definition_id__in=job_ids).values_list("definition_id", flat=True))
    assert len(runs) == SPIKE and set(runs.values()) == {1}, "exactly one run per occurrence"
    assert JobRun.objects.exclude(status=RunStatus.SUCCEEDED).count() == 0
    delivered = Counter(d.webhook_id for d in receiver.received())
    assert len(delivered) == SPIKE
    assert max(delivered.values()) == 1, "no run was delivered twice"
    assert all(d.signature_ok for d in receiver.received())
