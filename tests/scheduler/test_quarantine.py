"""A definition the scheduler cannot plan is quarantined (paused, with a reason) and the batch goes on.

Bad rows are planted with raw SQL, the way they appear in real life: validation let them in once
(an older tzdata, an older parser), so no model or API code runs on the way in.
"""

import logging
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from apps.jobs.models import JobDefinition, JobRun, JobStatus, RunStatus
from apps.scheduler.services import materialize_due_runs
from apps.tenants.models import Role
from apps.tenants.services import tenant_create
from tests.dashboard.conftest import logged_in, make_user
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 11, 2, 3, 0, tzinfo=UTC)
ALL = list(range(64))

POISONS = {
    # A zone tzdata does not (or no longer) have.
    "zone": ("timezone", "Mars/Olympus", "unknown time zone 'Mars/Olympus'"),
    # Not cron at all.
    "garbage": ("cron_expression", "every tuesday-ish", "a cron expression needs exactly 5 fields"),
    # Rows stored while croniter parsed cron (before apps/jobs/cron.py): it took a sixth
    # (seconds) field and 'L-3'; Chime's own parser refuses both.
    "upgraded parser": ("cron_expression", "0 0 * * * *", "seconds are not supported"),
    "upgraded parser, L-3": ("cron_expression", "0 0 L-3 * *", "'L-n' (n days before the last) is not supported"),
    # A DST policy value a later release dropped.
    "dst policy": ("dst_gap", "sideways", "dst_policy.gap must be 'shift' or 'skip'"),
}


def plant(job, column: str, value: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE jobs_jobdefinition SET {column} = %s WHERE id = %s", [value, job.id])  # noqa: S608


@pytest.fixture
def tenants(db):
    return [tenant_create(slug=f"healthy-{i}", name=f"Healthy {i}") for i in range(4)]


@pytest.fixture
def batch(tenant, tenants):
    """Four tenants' healthy jobs due around the poisoned ones (before and after them in the
    due-scan's next_fire_at order), and one poisoned job of `tenant` per kind."""
    healthy = []
    for i in range(20):
        healthy.append(
            JobFactory(
                tenant=tenants[i % 4],
                cron_expression="* * * * *",
                next_fire_at=T0 - timedelta(minutes=i % 2),  # due before and after the poisoned ones
            )
        )
    poisoned = {}
    for offset, (kind, (column, value, _)) in enumerate(POISONS.items()):
        job = JobFactory(tenant=tenant, cron_expression="*/5 * * * *", next_fire_at=T0 - timedelta(seconds=30 - offset))
        plant(job, column, value)
        poisoned[kind] = job
    return healthy, poisoned


def quarantine_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("quarantined job")]


def test_poisoned_rows_are_paused_and_the_rest_of_the_batch_materializes_in_the_same_step(
    batch, caplog, django_capture_on_commit_callbacks
):
    healthy, poisoned = batch
    with caplog.at_level(logging.WARNING, logger="apps.scheduler"), django_capture_on_commit_callbacks(execute=True):
        processed, _ = materialize_due_runs(partitions=ALL, now=T0, batch_size=1000)

    assert processed == len(healthy) + len(poisoned)
    for job in healthy:
        job.refresh_from_db()
        runs = JobRun.objects.filter(definition=job, status=RunStatus.SCHEDULED)
        assert runs.filter(scheduled_for=T0).exists(), job.name
        assert job.status == JobStatus.ACTIVE and job.next_fire_at == T0 + timedelta(minutes=1)
    lines = quarantine_lines(caplog)
    for kind, job in poisoned.items():
        job.refresh_from_db()
        expected = POISONS[kind][2]
        assert job.status == JobStatus.PAUSED, kind
        assert job.paused_at == T0
        assert job.status_reason.startswith("Paused by Chime: its schedule could not be evaluated: "), kind
        assert expected in job.status_reason, (kind, job.status_reason)
        assert job.status_reason.endswith("Fix the schedule and resume the job.")
        assert not JobRun.objects.filter(definition=job).exists()
        mine = [line for line in lines if str(job.id) in line]
        assert len(mine) == 1 and str(job.tenant_id) in mine[0], (kind, lines)
    assert len(lines) == len(poisoned)


def test_the_reason_reads_as_a_sentence():
    from apps.jobs.schedules import parse_timezone
    from apps.scheduler.quarantine import quarantine_reason

    with pytest.raises(Exception) as raised:
        parse_timezone("Mars/Olympus")
    assert quarantine_reason(raised.value) == (
        "Paused by Chime: its schedule could not be evaluated: unknown time zone 'Mars/Olympus'. "
        "Use an IANA name such as Europe/Berlin. Fix the schedule and resume the job."
    )
    assert quarantine_reason(ValueError("x" * 2000)).startswith(
        "Paused by Chime: its schedule could not be evaluated: ValueError: xxx"
    )
    assert len(quarantine_reason(ValueError("x" * 2000))) <= 500


def test_a_quarantined_row_is_logged_once_and_does_not_come_back(batch, caplog, django_capture_on_commit_callbacks):
    healthy, poisoned = batch
    with caplog.at_level(logging.WARNING, logger="apps.scheduler"), django_capture_on_commit_callbacks(execute=True):
        materialize_due_runs(partitions=ALL, now=T0, batch_size=1000)
        later = T0 + timedelta(minutes=3)
        materialize_due_runs(partitions=ALL, now=later, batch_size=1000)
    assert len(quarantine_lines(caplog)) == len(poisoned)
    for job in healthy:
        job.refresh_from_db()
        assert job.next_fire_at == later + timedelta(minutes=1), "the healthy jobs kept going"
        assert JobRun.objects.filter(definition=job, scheduled_for=later).exists()


def test_a_poisoned_row_first_in_a_small_batch_does_not_hold_back_the_next_batches(tenant, tenants):
    """The failure the issue measured: the same row first in every batch, forever."""
    bad = JobFactory(tenant=tenant, next_fire_at=T0 - timedelta(minutes=1))
    plant(bad, "timezone", "Mars/Olympus")
    healthy = [JobFactory(tenant=tenants[i % 4], next_fire_at=T0) for i in range(6)]
    for _ in range(4):
        materialize_due_runs(partitions=ALL, now=T0, batch_size=2)
    assert JobRun.objects.filter(definition__in=healthy).count() == 6
    bad.refresh_from_db()
    assert bad.status == JobStatus.PAUSED


# --------------------------------------------------------------------------- resuming


@pytest.fixture
def quarantined(tenant):
    job = JobFactory(tenant=tenant, next_fire_at=T0 - timedelta(minutes=1))
    plant(job, "timezone", "Mars/Olympus")
    materialize_due_runs(partitions=ALL, now=T0, batch_size=1000)
    job.refresh_from_db()
    assert job.status == JobStatus.PAUSED
    return job


def test_the_api_shows_the_reason(api, quarantined):
    body = api.get(f"/api/v1/jobs/{quarantined.id}").json()
    assert body["status"] == "paused" and body["enabled"] is False
    assert "unknown time zone 'Mars/Olympus'" in body["status_reason"]


def test_resuming_through_the_api_while_the_schedule_is_still_invalid_is_a_400_with_the_field(api, quarantined):
    response = api.post(f"/api/v1/jobs/{quarantined.id}/resume")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid"
    assert "Unknown time zone 'Mars/Olympus'" in error["fields"]["schedule.timezone"][0]
    quarantined.refresh_from_db()
    assert quarantined.status == JobStatus.PAUSED and "Mars/Olympus" in quarantined.status_reason


def test_a_backfill_of_a_quarantined_job_is_refused_like_any_paused_one_not_a_500(api, quarantined):
    response = api.post(
        f"/api/v1/jobs/{quarantined.id}/backfill",
        {"start": "2026-01-01T00:00:00Z", "end": "2026-01-02T00:00:00Z"},
        format="json",
    )
    assert response.status_code == 409, response.content
    assert "paused" in response.json()["error"]["message"]


def test_fixing_the_schedule_then_resuming_works(api, quarantined):
    response = api.patch(
        f"/api/v1/jobs/{quarantined.id}",
        {"schedule": {"type": "cron", "expression": "0 * * * *", "timezone": "Europe/Berlin"}},
        format="json",
    )
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "paused"
    response = api.post(f"/api/v1/jobs/{quarantined.id}/resume")
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "active" and response.json()["status_reason"] is None


def test_the_dashboard_shows_the_reason_and_refuses_a_resume_with_the_error(tenant, quarantined):
    client = logged_in(make_user("owner@acme.test", tenant, Role.OWNER))
    listing = client.get("/jobs/").content.decode()
    assert "unknown time zone &#x27;Mars/Olympus&#x27;" in listing
    detail = client.get(f"/jobs/{quarantined.id}/").content.decode()
    assert "unknown time zone &#x27;Mars/Olympus&#x27;" in detail

    edit = client.get(f"/jobs/{quarantined.id}/edit/")
    assert edit.status_code == 200, "the job can be opened for fixing"

    row = client.post(f"/jobs/{quarantined.id}/resume/", HTTP_HX_REQUEST="true").content.decode()
    assert 'role="alert"' in row and "Unknown time zone &#x27;Mars/Olympus&#x27;" in row
    quarantined.refresh_from_db()
    assert quarantined.status == JobStatus.PAUSED


def test_a_paused_job_with_a_valid_schedule_resumes_as_before(api, tenant):
    job = JobFactory(tenant=tenant, next_fire_at=T0 + timedelta(days=400))
    JobDefinition.objects.filter(id=job.id).update(status=JobStatus.PAUSED, status_reason="Paused by the API.")
    response = api.post(f"/api/v1/jobs/{job.id}/resume")
    assert response.status_code == 200 and response.json()["status"] == "active"


# --------------------------------------------------------------------------- failing steps


def test_a_scheduler_whose_steps_keep_failing_releases_its_partitions_and_stays_out_for_a_while():
    from apps.scheduler.leases import LeaseKeeper, StepFailures, ensure_lease_rows
    from apps.scheduler.models import SchedulerLease, SchedulerNode

    ensure_lease_rows()
    failing = LeaseKeeper(candidates=ALL, pinned=False)
    failing.refresh()
    healthy = LeaseKeeper(candidates=ALL, pinned=False)
    healthy.refresh()  # alive (heartbeat), but every partition is taken
    assert len(failing.held) == 64 and healthy.held == {}
    failures = StepFailures(limit=3, rest_seconds=60, max_rest_seconds=600)

    assert failures.failed(failing) is None and failures.failed(failing) is None
    assert SchedulerLease.objects.filter(owner=failing.owner).count() == 64, "two failures: still holding"
    assert failures.failed(failing) == 60
    assert failing.held == {} and not SchedulerLease.objects.filter(owner=failing.owner).exists()
    assert not SchedulerNode.objects.filter(owner=failing.owner).exists(), "out of the others' fair share"

    healthy.refresh()
    assert len(healthy.held) == 64, "the other scheduler takes every partition over"
    failing.refresh()  # resting: takes nothing back, no heartbeat
    assert failing.held == {} and not SchedulerNode.objects.filter(owner=failing.owner).exists()

    healthy.release_all()  # the other one is gone: resting would stall every partition ...
    failing.refresh()
    assert len(failing.held) == 64, "... so a lone scheduler tries again at once"
    for _ in range(3):
        rest = failures.failed(failing)
    assert rest == 120, "a second stand-down without a working step in between lasts twice as long"
    failures.succeeded(worked=True)
    failing.refresh()
    for _ in range(3):
        rest = failures.failed(failing)
    assert rest == 60, "a step that worked resets the rest"


def test_a_failing_step_without_partitions_has_nothing_to_release():
    from apps.scheduler.leases import LeaseKeeper, StepFailures

    idle = LeaseKeeper(candidates=ALL, pinned=False)  # never refreshed: holds nothing
    failures = StepFailures(limit=1, rest_seconds=30, max_rest_seconds=600)
    assert failures.failed(idle) is None and not idle.resting


@pytest.fixture
def no_zone_database():
    """This process loses its tz database (as on a host without tzdata), then gets it back."""
    import zoneinfo

    from apps.jobs import schedules, zones

    def clear():
        zoneinfo.ZoneInfo.clear_cache()
        for cached in (zones._available_zones, zones.load_zone, schedules._parse_cached):
            cached.cache_clear()
        schedules._next_after_cached.cache_clear()

    zoneinfo.reset_tzpath(to=["/nonexistent-tzdata"])
    clear()
    yield
    zoneinfo.reset_tzpath()
    clear()


def test_a_scheduler_without_a_tz_database_quarantines_nothing_and_fails_its_step(tenant, tenants, no_zone_database):
    """Every zone is unknown there: the jobs are fine, the host is not. Its step fails (and after a
    few, it stands down for a scheduler that can plan them)."""
    from apps.scheduler.quarantine import ZoneDatabaseMissing

    jobs = [
        JobFactory(tenant=tenants[i % 4], timezone=zone, next_fire_at=T0)
        for i, zone in enumerate(["Europe/Berlin", "UTC", "America/New_York"])
    ]
    with pytest.raises(ZoneDatabaseMissing, match="no usable tz database"):
        materialize_due_runs(partitions=ALL, now=T0, batch_size=1000)
    for job in jobs:
        job.refresh_from_db()
        assert job.status == JobStatus.ACTIVE and job.status_reason == ""


# --------------------------------------------------------------------------- rows PostgreSQL refuses

REFUSE_RUNS_SQL = """
CREATE FUNCTION chime_test_refuse_runs() RETURNS trigger AS $$
BEGIN
    IF NEW.definition_id::text = ANY(string_to_array(current_setting('chime_test.refused'), ',')) THEN
        RAISE EXCEPTION 'value refused for this test' USING ERRCODE = '22023';  -- a data exception
    END IF;
    RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER chime_test_refuse_runs BEFORE INSERT ON jobs_jobrun
    FOR EACH ROW EXECUTE FUNCTION chime_test_refuse_runs();
"""


def refuse_runs_of(*jobs) -> None:
    """PostgreSQL refuses (SQLSTATE 22023) the runs of these jobs, in this test's transaction."""
    with connection.cursor() as cursor:
        cursor.execute(REFUSE_RUNS_SQL)
        cursor.execute("SELECT set_config('chime_test.refused', %s, true)", [",".join(str(j.id) for j in jobs)])


def test_a_row_whose_runs_postgresql_refuses_is_quarantined_and_the_batch_goes_on(
    tenant, tenants, caplog, django_capture_on_commit_callbacks
):
    bad = JobFactory(tenant=tenant, next_fire_at=T0)
    healthy = [JobFactory(tenant=tenants[i % 4], next_fire_at=T0) for i in range(8)]
    refuse_runs_of(bad)
    with caplog.at_level(logging.WARNING, logger="apps.scheduler"), django_capture_on_commit_callbacks(execute=True):
        processed, _ = materialize_due_runs(partitions=ALL, now=T0, batch_size=1000)
    assert processed == 9
    assert JobRun.objects.filter(definition__in=healthy, scheduled_for=T0).count() == 8
    bad.refresh_from_db()
    assert bad.status == JobStatus.PAUSED and bad.next_fire_at == T0
    assert bad.status_reason.startswith("Paused by Chime: its runs could not be recorded: ")
    assert "value refused for this test" in bad.status_reason and "CONTEXT" not in bad.status_reason
    assert len([line for line in quarantine_lines(caplog) if str(bad.id) in line]) == 1


def test_when_postgresql_refuses_every_row_the_step_fails_and_nothing_is_quarantined(tenant):
    import psycopg

    jobs = [JobFactory(tenant=tenant, next_fire_at=T0) for _ in range(3)]
    refuse_runs_of(*jobs)
    with pytest.raises(psycopg.DataError):  # raw from the unnest INSERT's own cursor
        materialize_due_runs(partitions=ALL, now=T0, batch_size=1000)
    assert not JobDefinition.objects.filter(id__in=[j.id for j in jobs], status=JobStatus.PAUSED).exists()
