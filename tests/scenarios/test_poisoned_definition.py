"""Real processes: a definition no scheduler can plan, and a scheduler whose steps keep failing,
must not stop other tenants' jobs from firing on time.

1. Poisoned definitions (a zone tzdata lacks, garbage cron, a cron only an older parser took),
   planted with raw SQL beside 100 healthy jobs of four other tenants, with two schedulers
   sharing the partitions: every healthy job fires on time, once; each poisoned job is paused
   with a readable reason the API shows, quarantined (and logged) by one scheduler only.
2. A scheduler whose every write of runs fails (a PostgreSQL trigger refuses runs of the
   partitions it holds) hands its partitions over instead of renewing them forever.
3. A scheduler without a tz database (PYTHONTZPATH to nowhere) finds every zone unknown: it
   quarantines nothing and hands over to the other scheduler, which fires the jobs.
"""

import re
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from apps.core.ids import uuid7
from apps.jobs.models import JobDefinition, JobRun, JobStatus, RunStatus, ScheduleType, partition_for
from apps.tenants.selectors import signing_secrets_valid
from apps.tenants.services import tenant_create
from tests.support.processes import start_scheduler, wait_until
from tests.support.receiver import Receiver

from .conftest import FAST

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

HEALTHY = 100
POISONS = [
    ("timezone", "Mars/Olympus", "unknown time zone 'Mars/Olympus'"),
    ("cron_expression", "every tuesday-ish", "a cron expression needs exactly 5 fields"),
    ("cron_expression", "0 0 * * * *", "seconds are not supported"),
]
FIRE_LAG_BOUND_SECONDS = 5  # generous on a shared 2-core machine; before the fix they never fired


@pytest.fixture
def healthy_tenants(db):
    return [tenant_create(slug=f"healthy-{i}", name=f"Healthy {i}") for i in range(4)]


@pytest.fixture
def all_receiver(tenant, healthy_tenants):
    secrets = [s for t in [tenant, *healthy_tenants] for s in signing_secrets_valid(tenant=t)]
    server = Receiver(secrets=secrets).start()
    yield server
    server.stop()


def once_jobs(tenants, url: str, *, count: int, first_at: datetime, spread_seconds: float) -> list:
    jobs = []
    for i in range(count):
        job_id = uuid7()
        at = first_at + timedelta(seconds=spread_seconds * i / count)
        jobs.append(
            JobDefinition(
                id=job_id,
                partition=partition_for(job_id),
                tenant=tenants[i % len(tenants)],
                name=f"healthy-{i}",
                schedule_type=ScheduleType.ONCE,
                run_at=at,
                next_fire_at=at,
                target_url=f"{url}/healthy/{i}",
            )
        )
    JobDefinition.objects.bulk_create(jobs)
    return jobs


def plant_poisoned(tenant, url: str, due_at: datetime) -> dict:
    """Two of each kind, due before every healthy job (first in the due-scan's order)."""
    planted = {}
    for copy in range(2):
        for column, value, expected in POISONS:
            job_id = uuid7()
            JobDefinition.objects.create(
                id=job_id,
                partition=partition_for(job_id),
                tenant=tenant,
                name=f"poisoned-{column}-{copy}",
                schedule_type=ScheduleType.CRON,
                cron_expression="* * * * *",
                next_fire_at=due_at + timedelta(days=1),  # not due until poisoned: no race with a scheduler
                target_url=f"{url}/poisoned",
            )
            with connection.cursor() as cursor:
                cursor.execute(
                    f"UPDATE jobs_jobdefinition SET {column} = %s, next_fire_at = %s WHERE id = %s",  # noqa: S608
                    [value, due_at, job_id],
                )
            planted[job_id] = expected
    return planted


def quarantine_lines(*processes) -> list[str]:
    return [line for p in processes for line in p.log().splitlines() if "quarantined job" in line]


@pytest.mark.timeout(180)
def test_poisoned_definitions_do_not_hold_back_healthy_jobs_of_other_tenants(
    chime, api, tenant, healthy_tenants, all_receiver
):
    first = chime["scheduler"]
    second = chime["second"] = start_scheduler(name="scheduler-second", **FAST)
    wait_until(lambda: "now holding 32 partitions" in first.log(), timeout=30, message="partitions shared")

    now = datetime.now(UTC)
    poisoned = plant_poisoned(tenant, all_receiver.url, due_at=now - timedelta(seconds=1))
    healthy = once_jobs(
        healthy_tenants, all_receiver.url, count=HEALTHY, first_at=now + timedelta(seconds=4), spread_seconds=3
    )
    wait_until(
        lambda: JobRun.objects.filter(definition__in=healthy, status=RunStatus.SUCCEEDED).count() >= HEALTHY,
        timeout=60,
        message="every healthy job delivered",
    )

    runs = {run.id: run for run in JobRun.objects.filter(definition__in=healthy)}
    assert Counter(run.definition_id for run in runs.values()) == Counter({job.id: 1 for job in healthy})
    deliveries = all_receiver.received(lambda d: d.path.startswith("/healthy/"))
    assert Counter(d.webhook_id for d in deliveries) == Counter({str(run_id): 1 for run_id in runs})
    assert all(d.signature_ok for d in deliveries)
    lags = sorted(d.received_at - runs[_uuid(d.webhook_id)].scheduled_for.timestamp() for d in deliveries)
    print(f"\nfire lag of {len(lags)} healthy runs: p50 {lags[len(lags) // 2]:.2f} s, max {lags[-1]:.2f} s")
    assert lags[-1] < FIRE_LAG_BOUND_SECONDS, f"fire lag p50 {lags[len(lags) // 2]:.2f} s, max {lags[-1]:.2f} s"

    lines = quarantine_lines(first, second)
    for job_id, expected in poisoned.items():
        body = api.get(f"/api/v1/jobs/{job_id}").json()
        assert body["status"] == JobStatus.PAUSED and body["enabled"] is False
        assert body["status_reason"].startswith("Paused by Chime: its schedule could not be evaluated: ")
        assert expected in body["status_reason"]
        assert not JobRun.objects.filter(definition_id=job_id).exists()
        mine = [line for line in lines if str(job_id) in line]
        assert len(mine) == 1, f"quarantined once, by one scheduler: {mine}"
        assert str(tenant.id) in mine[0]
    assert not all_receiver.received(lambda d: d.path == "/poisoned")
    for process in (first, second):
        assert "scheduler step failed" not in process.log()


def _uuid(text: str):
    import uuid

    return uuid.UUID(text)


# Refuses runs of the partitions a given scheduler process holds: that process's every write of
# runs fails (any scheduler that takes those partitions over writes them fine).
TRIGGER_SQL = """
CREATE OR REPLACE FUNCTION chime_test_refuse_broken_scheduler() RETURNS trigger AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM scheduler_schedulerlease
                WHERE partition = NEW.partition AND owner LIKE %(owner_pattern)s) THEN
        RAISE EXCEPTION 'injected failure: this scheduler cannot write runs';
    END IF;
    RETURN NEW;
END $$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS chime_test_refuse_broken_scheduler ON jobs_jobrun;
CREATE TRIGGER chime_test_refuse_broken_scheduler BEFORE INSERT ON jobs_jobrun
    FOR EACH ROW EXECUTE FUNCTION chime_test_refuse_broken_scheduler();
"""
DROP_TRIGGER_SQL = """
DROP TRIGGER IF EXISTS chime_test_refuse_broken_scheduler ON jobs_jobrun;
DROP FUNCTION IF EXISTS chime_test_refuse_broken_scheduler();
"""


@pytest.fixture
def refuse_runs_of(transactional_db):
    """refuse_runs_of(process): every insert of runs into a partition `process` holds fails."""

    def install(process):
        with connection.cursor() as cursor:
            # Lease owners are "host:pid:suffix" (apps.scheduler.leases.new_owner_id). The pattern
            # is spliced into the function body as an SQL literal (no parameters inside $$).
            cursor.execute(TRIGGER_SQL.replace("%(owner_pattern)s", f"'%:{int(process.popen.pid)}:%'"))

    yield install
    with connection.cursor() as cursor:
        cursor.execute(DROP_TRIGGER_SQL)


@pytest.mark.timeout(180)
def test_a_scheduler_whose_steps_keep_failing_hands_its_partitions_over(
    chime, healthy_tenants, all_receiver, refuse_runs_of
):
    healthy_scheduler = chime["scheduler"]
    broken = chime["broken"] = start_scheduler(
        name="scheduler-broken",
        CHIME_SCHEDULER_MAX_FAILED_STEPS="3",
        CHIME_SCHEDULER_STAND_DOWN_SECONDS="120",  # stays out for the rest of the test
        **FAST,
    )
    wait_until(lambda: "now holding 32 partitions" in broken.log(), timeout=30, message="partitions shared")
    held_line = broken.log().split("now holding 32 partitions:")[1].split("\n")[0]
    held_by_broken = {int(p) for p in re.findall(r"\d+", held_line)}
    refuse_runs_of(broken)

    jobs = once_jobs(
        healthy_tenants, all_receiver.url, count=40, first_at=datetime.now(UTC) + timedelta(seconds=2), spread_seconds=2
    )
    assert {job.partition for job in jobs} & held_by_broken, "some jobs are due in the broken scheduler's partitions"
    wait_until(
        lambda: JobRun.objects.filter(definition__in=jobs, status=RunStatus.SUCCEEDED).count() >= len(jobs),
        timeout=90,
        message="every job delivered",
    )

    log = broken.log()
    assert "injected failure: this scheduler cannot write runs" in log, "the broken scheduler really failed"
    assert "3 scheduler steps failed in a row: released 32 partitions" in log
    assert "now holding 64 partitions" in healthy_scheduler.log(), "the healthy scheduler took them over"
    assert Counter(JobRun.objects.filter(definition__in=jobs).values_list("definition_id", flat=True)) == Counter(
        {job.id: 1 for job in jobs}
    )
    assert len({d.webhook_id for d in all_receiver.received()}) == len(jobs) == len(all_receiver.received())


def cron_jobs_due(tenants, url: str, *, count: int, at: datetime, zone: str) -> list:
    """Every-minute jobs in `zone` whose next occurrence is `at` (planted, not on a minute)."""
    jobs = []
    for i in range(count):
        job_id = uuid7()
        jobs.append(
            JobDefinition(
                id=job_id,
                partition=partition_for(job_id),
                tenant=tenants[i % len(tenants)],
                name=f"zoned-{i}",
                schedule_type=ScheduleType.CRON,
                cron_expression="* * * * *",
                timezone=zone,
                next_fire_at=at,
                target_url=f"{url}/zoned/{i}",
            )
        )
    JobDefinition.objects.bulk_create(jobs)
    return jobs


@pytest.mark.timeout(180)
def test_a_scheduler_without_a_tz_database_hands_over_instead_of_quarantining_everything(
    chime, healthy_tenants, all_receiver, tmp_path
):
    """A host without tzdata finds every zone unknown. Two schedulers must not fight over the
    jobs: the broken one pauses none of them, stands down, and the other one fires them."""
    healthy_scheduler = chime["scheduler"]
    # zoneinfo falls back to the `tzdata` package when the system has no database; the bench's
    # requirements install it (a dependency of django-celery-beat): an empty package of that name
    # first on the path hides it, as a host without either would be.
    (tmp_path / "tzdata").mkdir()
    (tmp_path / "tzdata" / "__init__.py").write_text("")
    broken = chime["broken"] = start_scheduler(
        name="scheduler-no-tzdata",
        PYTHONTZPATH="/nonexistent-tzdata",
        PYTHONPATH=str(tmp_path),
        CHIME_SCHEDULER_MAX_FAILED_STEPS="3",
        CHIME_SCHEDULER_STAND_DOWN_SECONDS="120",
        **FAST,
    )
    wait_until(lambda: "now holding 32 partitions" in broken.log(), timeout=30, message="partitions shared")

    jobs = cron_jobs_due(
        healthy_tenants, all_receiver.url, count=40, at=datetime.now(UTC) + timedelta(seconds=2), zone="Europe/Berlin"
    )
    first_fires = {job.id: job.next_fire_at for job in jobs}
    wait_until(
        lambda: (
            JobRun.objects.filter(
                definition__in=jobs, status=RunStatus.SUCCEEDED, scheduled_for=jobs[0].next_fire_at
            ).count()
            >= len(jobs)
        ),
        timeout=90,
        message="every job's first occurrence delivered",
    )

    assert "no usable tz database" in broken.log(), "the broken scheduler really met the problem"
    assert "scheduler steps failed in a row: released 32 partitions" in broken.log()
    assert "quarantined job" not in broken.log() + healthy_scheduler.log()
    assert not JobDefinition.objects.filter(id__in=first_fires, status=JobStatus.PAUSED).exists()
