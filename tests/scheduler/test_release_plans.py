"""The fair release's queries keep their index when the statistics are stale (issue #12).

In any steady state nearly every run is finished, and that is what ANALYZE last saw: the planner
then believes almost no run is releasable. At the top of the hour the scheduler materializes tens
of thousands of `scheduled` runs before autovacuum analyzes again, and with the due index
(available_at, partition) usable, the planner read *every* due run through it for each tenant's
probe of the fair release: ~1 s per tick at 100,000 due runs, and a 100,000-run spike took 136 s
to materialize instead of 11 (docs/benchmarks.md). jobrun_due_idx now has a fence in its
condition (`attempt_count >= 0`, always true) that the fair release's queries do not state, so
they can only read jobrun_tenant_releasable_idx. This builds that stale-statistics state and reads
the plans."""

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from apps.core.prepared import id_array
from apps.jobs.models import JobRun, RunStatus
from apps.scheduler import fairness
from apps.scheduler.services import ANYTHING_DUE_SQL
from apps.tenants.services import tenant_create
from tests.factories import JobFactory
from tests.support.plans import indexes_read

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def stale_statistics():
    """8 tenants; ANALYZE sees 6,000 finished runs, then 4,000 due runs arrive unanalyzed."""
    now = timezone.now()
    jobs = [JobFactory(tenant=tenant_create(slug=f"plan-{n}", name=f"Plan {n}")) for n in range(8)]

    def runs(count, status, start):
        return [
            JobRun(tenant_id=job.tenant_id, definition=job, partition=job.partition, status=status,
                   scheduled_for=start + timedelta(seconds=i), available_at=start + timedelta(seconds=i))
            for i in range(count) for job in jobs
        ]  # fmt: skip

    JobRun.objects.bulk_create(runs(750, RunStatus.SUCCEEDED, now - timedelta(days=2)), batch_size=2000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobs_jobrun")
    JobRun.objects.bulk_create(runs(500, RunStatus.SCHEDULED, now - timedelta(hours=1)), batch_size=2000)
    return now, [str(job.tenant_id) for job in jobs]


def test_the_fair_release_reads_the_tenant_index_however_stale_the_statistics(stale_statistics):
    now, tenants = stale_statistics
    params = {"now": now, "partitions": list(range(16)), "priority": "default", "tenants": tenants,
              "per_tenant": 10, "skip": 0}  # fmt: skip
    tenants_plan = indexes_read(fairness.TENANTS_SQL, {})
    candidates_plan = indexes_read(fairness.CANDIDATES_SQL, params)
    assert "jobrun_due_idx" not in tenants_plan | candidates_plan
    assert tenants_plan == candidates_plan == {"jobrun_tenant_releasable_idx"}

    # The trap is real in this state: the same probe with the fence stated reads the due index.
    fenced = fairness.CANDIDATES_SQL.replace("r.status IN", "r.attempt_count >= 0 AND r.status IN")
    assert "jobrun_due_idx" in indexes_read(fenced, params)


def test_the_cheap_anything_due_check_still_reads_the_due_index(stale_statistics):
    now, _ = stale_statistics
    sql = ANYTHING_DUE_SQL.format(partition_filter="")
    assert indexes_read(sql, {"now": now}) == {"jobrun_due_idx"}


def test_the_release_flip_finds_its_runs_by_primary_key_however_stale_the_statistics(stale_statistics):
    """The flip picks 200 runs by id; with the statistics above, its status guard alone would make
    the planner scan all of jobrun_tenant_releasable_idx (~200 ms at a 100,000 spike)."""
    from apps.jobs.transitions import RELEASE_FENCED_SQL

    now, _ = stale_statistics
    ids = list(JobRun.objects.filter(status=RunStatus.SCHEDULED).values_list("id", flat=True)[:200])
    params = {"now": now, "ids": id_array(ids), "partitions": list(range(64)), "epochs": [1] * 64, "owner": "me"}
    assert "jobrun_tenant_releasable_idx" not in indexes_read(RELEASE_FENCED_SQL, params)
    assert "jobs_jobrun_pkey" in indexes_read(RELEASE_FENCED_SQL, params)

    # The trap is real in this state: the guard as the partial index states it reads that index.
    unfenced = RELEASE_FENCED_SQL.replace("(status || '') IN", "status IN", 1)
    assert "jobrun_tenant_releasable_idx" in indexes_read(unfenced, params)


def test_the_one_statement_claim_finds_its_runs_and_jobs_by_primary_key(stale_statistics):
    """The worker's claim (apps/jobs/transitions.py CLAIM_FREE_SQL) picks up to 200 runs by id and
    joins their jobs: primary-key probes of both, whatever ANALYZE last saw, and no partial index
    on `status` (the guard is fenced like the release flip's)."""
    from apps.jobs.transitions import CLAIM_FREE_SQL

    JobRun.objects.filter(status=RunStatus.SCHEDULED).update(status=RunStatus.QUEUED)  # unanalyzed
    ids = list(JobRun.objects.filter(status=RunStatus.QUEUED).values_list("id", flat=True)[:200])
    params = {"ids": id_array(ids), "now": timezone.now(), "owner": "me", "lease": timedelta(seconds=30)}
    read = indexes_read(CLAIM_FREE_SQL, params)
    assert {"jobs_jobrun_pkey", "jobs_jobdefinition_pkey"} <= read
    assert not {"jobrun_queued_idx", "jobrun_running_idx", "jobrun_tenant_releasable_idx"} & read
