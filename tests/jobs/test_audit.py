"""The invariant auditor (manage.py audit_runs) on real PostgreSQL.

Healthy data is made the way production makes it: jobs through the services, runs materialized
and released by the real scheduler tick under a lease, delivered by the real delivery service to
a real receiver (successes, a retry, a dead letter, a cancellation, skipped occurrences). Each
test then plants one kind of broken row beside it, with direct ORM/SQL writes, and asserts that
the auditor reports exactly that invariant, those rows, and a non-zero exit.
"""

import json
import subprocess
import sys
import uuid
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.utils import timezone

from apps.delivery.services import deliver_runs
from apps.jobs.models import JobDefinition, JobRun, JobStatus, RunAttempt, RunStatus, ScheduleType
from apps.jobs.services import job_create, job_pause, job_trigger
from apps.scheduler.leases import LeaseKeeper, ensure_lease_rows
from apps.scheduler.services import scheduler_tick
from tests.factories import JobFactory
from tests.support.processes import ROOT, process_env
from tests.support.receiver import Reply

pytestmark = pytest.mark.django_db

MINUTE = timedelta(minutes=1)


# --- Healthy data, made by the real scheduler and workers -----------------------------------


def _healthy(tenant, receiver) -> dict[str, JobDefinition]:
    receiver.respond = lambda delivery: Reply(status=500) if delivery.path == "/fail" else Reply()
    now = timezone.now()
    target = {"target_url": f"{receiver.url}/hook"}
    jobs = {
        "once": job_create(tenant=tenant, name="once", schedule_type=ScheduleType.ONCE, run_at=now, **target),
        "later": job_create(
            tenant=tenant, name="later", schedule_type=ScheduleType.ONCE, run_at=now + timedelta(days=1), **target
        ),
        "minutely": job_create(
            tenant=tenant, name="minutely", schedule_type=ScheduleType.CRON, cron_expression="* * * * *", **target
        ),
        "hourly_skip": job_create(
            tenant=tenant,
            name="hourly-skip",
            schedule_type=ScheduleType.CRON,
            cron_expression=f"{(now.minute + 30) % 60} * * * *",  # last fired ~30 min ago
            misfire_policy="skip",
            **target,
        ),
        "flaky": job_create(
            tenant=tenant,
            name="flaky",
            schedule_type=ScheduleType.ONCE,
            run_at=now,
            target_url=f"{receiver.url}/fail",
            retry_max_attempts=3,
            retry_initial_backoff_seconds=60,
        ),
        "dead": job_create(
            tenant=tenant,
            name="dead",
            schedule_type=ScheduleType.ONCE,
            run_at=now,
            target_url=f"{receiver.url}/fail",
            retry_max_attempts=1,
        ),
        "paused": job_create(
            tenant=tenant, name="paused", schedule_type=ScheduleType.CRON, cron_expression="* * * * *", **target
        ),
    }
    # Occurrences due now: this minute's (on time), and three late ones of a skip-policy job.
    this_minute = now.replace(second=0, microsecond=0)
    JobDefinition.objects.filter(id__in=[jobs["minutely"].id, jobs["paused"].id]).update(next_fire_at=this_minute)
    last_fired = now.replace(minute=(now.minute + 30) % 60, second=0, microsecond=0)
    if last_fired > now:
        last_fired -= timedelta(hours=1)
    JobDefinition.objects.filter(id=jobs["hourly_skip"].id).update(next_fire_at=last_fired - timedelta(hours=2))
    manual = job_trigger(job=jobs["minutely"])

    ensure_lease_rows()
    leases = LeaseKeeper(candidates=list(range(64)), pinned=True)
    leases.refresh()
    tick = scheduler_tick(leases=leases)  # materializes and releases what is due
    assert tick.materialized == 6
    job_pause(job=jobs["paused"])  # paused after its run was released: the worker cancels that run
    queued = [str(i) for i in JobRun.objects.filter(status=RunStatus.QUEUED).values_list("id", flat=True)]
    outcomes = deliver_runs(queued).outcomes
    # At a minute boundary the look-ahead may add the next minute's runs: at least these.
    assert outcomes["succeeded"] >= 3 and outcomes["cancelled"] >= 1, outcomes
    assert (outcomes["retrying"], outcomes["failed"]) == (1, 1), outcomes
    assert JobRun.objects.get(id=manual.id).status == RunStatus.SUCCEEDED
    assert JobRun.objects.filter(definition=jobs["hourly_skip"], status=RunStatus.SKIPPED).count() == 3
    assert JobRun.objects.get(definition=jobs["flaky"]).status == RunStatus.RETRYING
    return jobs


@pytest.fixture
def healthy(tenant, receiver, redis_required):
    return _healthy(tenant, receiver)


def audit(*args: str) -> tuple[int, dict]:
    """Run the command in-process; (exit code, its JSON)."""
    out = StringIO()
    try:
        call_command("audit_runs", "--json", *args, stdout=out)
        code = 0
    except CommandError as error:
        code = error.returncode
    return code, json.loads(out.getvalue())


def reported(result: dict) -> dict[str, tuple[int, set[str]]]:
    return {v["invariant"]: (v["count"], set(v["examples"])) for v in result["violations"]}


def ids(*rows) -> set[str]:
    return {str(row.id) for row in rows}


def a_job(tenant, **fields) -> JobDefinition:
    """A job the scheduler has nothing to do for (no next_fire_at), to hang planted runs on."""
    return JobFactory(tenant=tenant, **fields)


def a_run(job, *, at=None, **fields) -> JobRun:
    now = timezone.now()
    at = at or now - timedelta(seconds=JobRun.objects.count() + 1)  # a distinct occurrence each
    defaults = {"status": RunStatus.SCHEDULED, "available_at": at}
    return JobRun.objects.create(
        tenant=job.tenant, definition=job, partition=job.partition, scheduled_for=at, **{**defaults, **fields}
    )


def an_attempt(run, number: int) -> RunAttempt:
    now = timezone.now()
    return RunAttempt.objects.create(run=run, number=number, started_at=now, finished_at=now, status_code=200)


# --- Healthy ----------------------------------------------------------------------------------


def test_a_healthy_database_has_no_violations(healthy):
    code, result = audit()
    assert (code, result["violations"]) == (0, [])
    assert result["ok"] is True
    assert len(result["checked"]) == 12
    out = StringIO()
    call_command("audit_runs", stdout=out)
    (line,) = out.getvalue().splitlines()
    assert line.startswith("audit_runs: no violations (12 invariants checked at ")


# --- Due occurrences without their run --------------------------------------------------------


def test_an_active_definition_left_overdue_is_reported(healthy, tenant):
    now = timezone.now()
    overdue = a_job(tenant, next_fire_at=now - 10 * MINUTE)
    a_job(tenant, next_fire_at=now - 30 * timedelta(seconds=1))  # late, within the misfire grace
    a_job(tenant, next_fire_at=now - 10 * MINUTE, status=JobStatus.PAUSED)  # paused: not due
    code, result = audit()
    assert code == 1
    assert reported(result) == {"definition_overdue": (1, ids(overdue))}
    assert audit("--grace", "3600")[0] == 0, "a larger grace tolerates it"


def test_an_occurrence_the_scheduler_moved_past_without_a_run_is_reported(healthy, tenant):
    now = timezone.now()
    # A cron job advanced past 11:00 whose 11:00 run is missing (e.g. an insert lost outside the
    # materialization's transaction), and a completed `once` job that never got its run.
    cron = a_job(tenant, last_scheduled_for=now - 5 * MINUTE, next_fire_at=now + 55 * MINUTE)
    once = a_job(tenant, schedule_type=ScheduleType.ONCE, run_at=now - 5 * MINUTE, status=JobStatus.COMPLETED)
    code, result = audit()
    assert code == 1
    assert reported(result) == {"occurrence_without_run": (2, ids(cron, once))}
    # Their runs appear: both hold again.
    a_run(cron, at=cron.last_scheduled_for, status=RunStatus.SKIPPED, finished_at=now)
    a_run(once, at=once.run_at, status=RunStatus.SKIPPED, finished_at=now)
    assert audit()[0] == 0


# --- Runs stuck -----------------------------------------------------------------------------


def test_runs_never_released_are_reported(healthy, tenant):
    now = timezone.now()
    job = a_job(tenant)
    scheduled = a_run(job, available_at=now - 10 * MINUTE)
    retrying = a_run(job, status=RunStatus.RETRYING, available_at=now - 10 * MINUTE, attempt_count=1)
    an_attempt(retrying, 1)
    a_run(job, available_at=now - 20 * timedelta(seconds=1))  # due a moment ago: the next tick takes it
    code, result = audit()
    assert code == 1
    assert reported(result) == {"run_not_released": (2, ids(scheduled, retrying))}


def test_runs_stuck_in_queued_are_reported(healthy, tenant):
    now = timezone.now()
    job = a_job(tenant)
    stale = a_run(job, status=RunStatus.QUEUED, queued_at=now - 10 * MINUTE)
    never = a_run(job, status=RunStatus.QUEUED, queued_at=None)  # the sweep can never pick it up
    a_run(job, status=RunStatus.QUEUED, queued_at=now - MINUTE)  # waiting for a worker: fine
    code, result = audit()
    assert code == 1
    assert reported(result) == {"run_stuck_queued": (2, ids(stale, never))}


def test_runs_running_past_their_lease_are_reported(healthy, tenant):
    now = timezone.now()
    job = a_job(tenant)
    running = {"status": RunStatus.RUNNING, "attempt_count": 1, "started_at": now, "lease_owner": "w:1"}
    expired = a_run(job, lease_expires_at=now - 5 * MINUTE, **running)
    no_lease = a_run(job, lease_expires_at=None, **running)
    a_run(job, lease_expires_at=now + 20 * timedelta(seconds=1), **running)  # in flight
    a_run(job, lease_expires_at=now - 20 * timedelta(seconds=1), **running)  # the next sweep recovers it
    code, result = audit()
    assert code == 1
    assert reported(result) == {"run_stuck_running": (2, ids(expired, no_lease))}


# --- Attempts and finish times ------------------------------------------------------------


def test_a_delivered_run_without_an_attempt_is_reported(healthy, tenant):
    now = timezone.now()
    job = a_job(tenant)
    succeeded = a_run(job, status=RunStatus.SUCCEEDED, attempt_count=1, finished_at=now)
    failed = a_run(job, status=RunStatus.FAILED, attempt_count=0, finished_at=now)
    a_run(job, status=RunStatus.CANCELLED, attempt_count=1, finished_at=now)  # cancelled before sending: fine
    code, result = audit()
    assert code == 1
    assert reported(result) == {"run_without_attempt": (2, ids(succeeded, failed))}


def test_attempt_numbers_that_do_not_match_the_claims_are_reported(healthy, tenant):
    now = timezone.now()
    job = a_job(tenant)
    missing_last = a_run(job, status=RunStatus.SUCCEEDED, attempt_count=2, finished_at=now)
    an_attempt(missing_last, 1)
    from_the_future = a_run(job, status=RunStatus.RETRYING, attempt_count=1, available_at=now + MINUTE)
    an_attempt(from_the_future, 2)
    numbered_zero = a_run(job, status=RunStatus.SUCCEEDED, attempt_count=1, finished_at=now)
    an_attempt(numbered_zero, 0)
    an_attempt(numbered_zero, 1)
    # A run cancelled right after its claim: its try was never sent, one attempt fewer is fine.
    cancelled = a_run(job, status=RunStatus.CANCELLED, attempt_count=2, finished_at=now)
    an_attempt(cancelled, 1)
    code, result = audit()
    assert code == 1
    assert result["violations"][0]["examples"][0].endswith("(attempt_count 2, 1 attempts numbered 1..1)")
    assert reported(result).keys() == {"attempts_inconsistent"}
    (count, examples) = reported(result)["attempts_inconsistent"]
    assert count == 3
    assert {example.split()[0] for example in examples} == ids(missing_last, from_the_future, numbered_zero)


def test_finish_times_that_contradict_the_status_are_reported(healthy, tenant):
    now = timezone.now()
    job = a_job(tenant)
    unfinished = a_run(job, status=RunStatus.SKIPPED, finished_at=None)
    reopened = a_run(job, status=RunStatus.SCHEDULED, available_at=now + MINUTE, finished_at=now)
    code, result = audit()
    assert code == 1
    assert reported(result) == {"finished_at_mismatch": (2, ids(unfinished, reopened))}


# --- Duplicates (the unique constraints dropped, as by a bad migration or restore) ---------------


def drop_constraint(table: str, name: str) -> None:
    """Inside the test's transaction, so the rollback at its end restores it. The deferred foreign
    key checks of the rows written so far run first (ALTER TABLE refuses pending ones)."""
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute(f"ALTER TABLE {table} DROP CONSTRAINT {name}")
        cursor.execute("SET CONSTRAINTS ALL DEFERRED")


def test_two_runs_for_one_occurrence_are_reported(healthy, tenant):
    now = timezone.now()
    job = a_job(tenant)
    at = now.replace(microsecond=0) - 5 * MINUTE
    drop_constraint("jobs_jobrun", "jobrun_unique_occurrence")
    for _ in range(2):
        a_run(job, at=at, status=RunStatus.SKIPPED, finished_at=now)
    code, result = audit()
    assert code == 1
    at_text = at.isoformat().replace("+00:00", "Z")
    assert reported(result) == {"duplicate_run": (1, {f"{job.id}@{at_text} x2"})}


def test_two_attempts_with_one_number_are_reported(healthy, tenant):
    now = timezone.now()
    run = a_run(a_job(tenant), status=RunStatus.SUCCEEDED, attempt_count=1, finished_at=now)
    drop_constraint("jobs_runattempt", "runattempt_unique_number")
    an_attempt(run, 1)
    an_attempt(run, 1)
    code, result = audit()
    assert code == 1
    assert reported(result) == {"duplicate_attempt": (1, {f"{run.id}#1 x2"})}


def test_an_attempt_whose_run_is_gone_is_reported(healthy, tenant):
    # No constraint refuses it in the database (RunAttempt.run, db_constraint=False): a raw delete
    # of a run that leaves its attempts behind.
    run = a_run(a_job(tenant), status=RunStatus.SUCCEEDED, attempt_count=1, finished_at=timezone.now())
    attempt = an_attempt(run, 1)
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM jobs_jobrun WHERE id = %s", [run.id])
    code, result = audit()
    assert code == 1
    assert reported(result) == {"attempt_without_run": (1, ids(attempt))}
    # It belongs to no tenant: an audit scoped to one does not report it.
    code, result = audit("--tenant", tenant.slug)
    assert (code, reported(result)) == (0, {})


def test_a_run_of_another_tenants_job_is_reported(healthy, tenant, other_tenant):
    job = a_job(tenant)
    run = a_run(job, status=RunStatus.SKIPPED, finished_at=timezone.now())
    JobRun.objects.filter(id=run.id).update(tenant=other_tenant)
    code, result = audit()
    assert code == 1
    assert reported(result) == {"run_tenant_mismatch": (1, ids(run))}
    code, result = audit("--tenant", other_tenant.slug)
    assert reported(result) == {"run_tenant_mismatch": (1, ids(run))}


# --- Scope: --since, --tenant, examples ---------------------------------------------------------


def uuid7_at(moment) -> uuid.UUID:
    """A UUIDv7 made at `moment` (version 7, variant 10, random tail)."""
    millis = int(moment.timestamp() * 1000)
    return uuid.UUID(int=(millis << 80) | (0x7 << 76) | (0b10 << 62) | (uuid.uuid4().int & ((1 << 62) - 1)))


def test_since_bounds_the_history_checks_but_not_the_stuck_ones(healthy, tenant):
    now = timezone.now()
    old = now - timedelta(days=3)
    job = a_job(tenant)
    succeeded = JobRun.objects.create(
        id=uuid7_at(old),
        tenant=tenant,
        definition=job,
        partition=job.partition,
        scheduled_for=old,
        available_at=old,
        status=RunStatus.SUCCEEDED,
        attempt_count=1,
        finished_at=old,
    )
    queued = a_run(job, status=RunStatus.QUEUED, queued_at=old)
    JobRun.objects.filter(id__in=[succeeded.id, queued.id]).update(created_at=old)
    assert reported(audit()[1]) == {"run_stuck_queued": (1, ids(queued))}, "default: the last 24 h of history"
    assert reported(audit("--since", "1h")[1]) == {"run_stuck_queued": (1, ids(queued))}
    everything = {"run_stuck_queued": (1, ids(queued)), "run_without_attempt": (1, ids(succeeded))}
    assert reported(audit("--since", "all")[1]) == everything
    assert reported(audit("--since", "4d")[1]) == everything
    since = (now - timedelta(days=4)).isoformat()
    code, result = audit("--since", since)
    assert (code, reported(result)) == (1, everything)
    assert result["since"].startswith(since[:16])


def test_tenant_limits_every_check_to_its_rows(healthy, tenant, other_tenant):
    job = a_job(other_tenant)
    stuck = a_run(job, status=RunStatus.QUEUED, queued_at=None)
    a_run(job, status=RunStatus.SUCCEEDED, attempt_count=1, finished_at=timezone.now())
    assert audit("--tenant", tenant.slug)[0] == 0
    code, result = audit("--tenant", other_tenant.slug)
    assert code == 1
    assert reported(result).keys() == {"run_stuck_queued", "run_without_attempt"}
    assert reported(result)["run_stuck_queued"] == (1, ids(stuck))
    assert result["tenant"] == other_tenant.slug


def test_examples_are_capped_but_the_count_is_total(healthy, tenant):
    job = a_job(tenant)
    for _ in range(7):
        a_run(job, status=RunStatus.QUEUED, queued_at=None)
    (violation,) = audit("--examples", "3")[1]["violations"]
    assert (violation["invariant"], violation["count"], len(violation["examples"])) == ("run_stuck_queued", 7, 3)


def test_the_table_names_each_violation_with_its_count_and_examples(healthy, tenant):
    job = a_job(tenant)
    stuck = a_run(job, status=RunStatus.QUEUED, queued_at=None)
    out = StringIO()
    with pytest.raises(CommandError) as raised:
        call_command("audit_runs", stdout=out)
    assert raised.value.returncode == 1
    assert str(raised.value) == "1 invariant(s) violated (1 rows)."
    first, header, row = out.getvalue().splitlines()
    assert first.startswith("audit_runs: 1 invariant(s) violated (12 invariants checked at ")
    assert header.split() == ["invariant", "rows", "what", "examples"]
    assert row.split()[:2] == ["run_stuck_queued", "1"]
    assert row.endswith(str(stuck.id))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--since", "yesterday"], "--since 'yesterday': expected 'all', a duration like 90s"),
        (["--since", "2h30"], "--since '2h30': expected"),
        (["--since", "2999-01-01T00:00:00Z"], "--since '2999-01-01T00:00:00Z' is in the future"),
        (["--since", "2026-13-45"], "--since '2026-13-45': expected"),
        (["--grace", "-5"], "--grace '-5': expected a number of seconds, 0 or more."),
        (["--grace", "soon"], "--grace 'soon': expected a number of seconds"),
        (["--grace", "nan"], "--grace 'nan': expected a number of seconds"),
        (["--examples", "1.5"], "--examples '1.5': expected a whole number, 0 or more."),
        (["--tenant", "nobody"], "--tenant 'nobody': no such tenant."),
    ],
)
def test_bad_options_are_a_usage_error_with_a_message(db, args, message):
    with pytest.raises(CommandError) as raised:
        call_command("audit_runs", *args, stdout=StringIO())
    assert raised.value.returncode == 2
    assert str(raised.value).startswith(message)


# --- As a separate process, on a database another process filled ---------------------------


def manage_audit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", "audit_runs", *args],
        cwd=ROOT,
        env=process_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.django_db(transaction=True)
def test_the_command_exit_code_as_a_process(tenant, receiver, redis_required):
    _healthy(tenant, receiver)
    clean = manage_audit()
    assert clean.returncode == 0, clean.stderr
    assert clean.stdout.startswith("audit_runs: no violations")

    stuck = a_run(a_job(tenant), status=RunStatus.QUEUED, queued_at=None)
    broken = manage_audit("--json")
    assert broken.returncode == 1, broken.stderr
    assert reported(json.loads(broken.stdout)) == {"run_stuck_queued": (1, ids(stuck))}
    assert "CommandError: 1 invariant(s) violated (1 rows)." in broken.stderr

    bad = manage_audit("--since", "last tuesday")
    assert bad.returncode == 2
    assert "--since 'last tuesday': expected" in bad.stderr
    assert "Traceback" not in bad.stderr
