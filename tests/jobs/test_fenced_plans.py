"""Every statement that picks runs by id finds them by primary key, whatever ANALYZE last saw.

In a steady state nearly every run is finished, and that is what the statistics say: the planner
then believes the partial indexes on `status` (jobrun_running_idx, jobrun_queued_idx, ...) nearly
empty, and reads `id = ANY(25 ids) AND status = 'running'` as a scan of the whole of
jobrun_running_idx filtered by id. Mid-spike that index holds every run claimed since the last
vacuum, dead or alive: the worker's recording of successes cost 170-230 us of PostgreSQL CPU per
run with 20,000 runs in it, 30 us with the guard fenced (docs/benchmarks.md, "Issue #12, sixth
session"). The guard is therefore written so that no index predicate matches it
(apps/jobs/transitions.py `status_fenced`, `_sql_in(fenced=True)`); these tests build the stale
state and read the plans of the statements the worker runs by id."""

import re
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.core.prepared import id_array, prepared_cursor
from apps.delivery.outcomes import _lock_mine
from apps.delivery.preparing import still_mine
from apps.delivery.recording import LOCK_JOBS_SQL
from apps.delivery.window_rows import PEEK_SQL
from apps.jobs.models import JobRun, RunStatus
from apps.jobs.transitions import CLAIM_FREE_SQL, RELEASE_FENCED_SQL, SUCCEED_MINE_SQL, Event, move, picked
from apps.tenants.selectors import SECRETS_BY_TENANT_SQL
from apps.tenants.services import tenant_create
from tests.factories import JobFactory
from tests.support.plans import indexes_in_plan, indexes_read, indexes_read_by

pytestmark = pytest.mark.django_db(transaction=True)

STATUS_INDEXES = {
    "jobrun_running_idx",
    "jobrun_queued_idx",
    "jobrun_due_idx",
    "jobrun_tenant_releasable_idx",
    "jobrun_dead_letters_idx",
    "jobrun_failed_id_idx",
}


@pytest.fixture
def stale():
    """ANALYZE sees 6,000 finished runs; then 2,000 `running` and 2,000 `queued` arrive unanalyzed.
    Returns 25 ids of each."""
    now = timezone.now()
    jobs = [JobFactory(tenant=tenant_create(slug=f"fence-{n}", name=f"Fence {n}")) for n in range(8)]

    def runs(count, status, start, **fields):
        return [
            JobRun(tenant_id=job.tenant_id, definition=job, partition=job.partition, status=status,
                   scheduled_for=start + timedelta(seconds=i), available_at=start + timedelta(seconds=i), **fields)
            for i in range(count) for job in jobs
        ]  # fmt: skip

    JobRun.objects.bulk_create(runs(750, RunStatus.SUCCEEDED, now - timedelta(days=2)), batch_size=2000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobs_jobrun")
    lease = {"lease_owner": "me", "lease_expires_at": now + timedelta(minutes=5), "attempt_count": 1}
    JobRun.objects.bulk_create(runs(250, RunStatus.RUNNING, now - timedelta(hours=1), **lease), batch_size=2000)
    JobRun.objects.bulk_create(runs(250, RunStatus.QUEUED, now - timedelta(hours=2), queued_at=now), batch_size=2000)

    def some(status):
        return list(JobRun.objects.filter(status=status).values_list("id", flat=True)[:25])

    return some(RunStatus.RUNNING), some(RunStatus.QUEUED)


def atomic_call(function, *args):
    with transaction.atomic():
        return function(*args)


def plans_of(call) -> list[tuple[str, set[str]]]:
    """Run `call`, then read the plan of every SELECT and UPDATE it sent."""
    with CaptureQueriesContext(connection) as captured:
        call()
    statements = [
        q["sql"] for q in captured.captured_queries if q["sql"].lstrip().upper().startswith(("SELECT", "UPDATE"))
    ]
    assert statements, "the call sent no statement"
    return [(sql, indexes_read(sql, None)) for sql in statements]


def test_the_recording_of_successes_reads_the_primary_key(stale):
    running, _ = stale
    params = [timezone.now(), id_array(running), "me"]
    assert indexes_read(SUCCEED_MINE_SQL, params) == {"jobs_jobrun_pkey"}

    # The trap is real in this state: the guard as jobrun_running_idx states it reads that index.
    unfenced = SUCCEED_MINE_SQL.replace("(status || '') IN", "status IN", 1)
    assert "jobrun_running_idx" in indexes_read(unfenced, params)


def test_picked_queries_read_the_primary_key(stale):
    running, queued = stale
    locked = picked(running, RunStatus.RUNNING).select_for_update().filter(lease_owner="me").values_list("id")
    peek = picked(queued, RunStatus.QUEUED).values_list("id", "definition__target_url").order_by("scheduled_for")
    for queryset in (locked, peek):
        read = indexes_read_by(queryset)
        assert "jobs_jobrun_pkey" in read
        assert not read & STATUS_INDEXES

    read = indexes_read(PEEK_SQL, [id_array(queued)])  # the window's first read, as PostgreSQL gets it
    assert {"jobs_jobrun_pkey", "jobs_jobdefinition_pkey"} <= read
    assert not read & STATUS_INDEXES

    # Without the fence the same query reads the partial index.
    assert "jobrun_running_idx" in indexes_read_by(JobRun.objects.filter(id__in=running, status=RunStatus.RUNNING))


@pytest.mark.parametrize(
    "what",
    ["move by ids (retry)", "move by ids (hand back)", "the recorder's lock", "the sender's lease check"],
)
def test_the_workers_statements_by_id_read_no_status_index(stale, what):
    running, _ = stale
    now = timezone.now()
    call = {
        "move by ids (retry)": lambda: move(Event.RETRY, running, where={"lease_owner": "me"}, available_at=now),
        "move by ids (hand back)": lambda: move(Event.HAND_BACK, running, where={"lease_owner": "me"}),
        "the recorder's lock": lambda: atomic_call(_lock_mine, running, "me"),
        "the sender's lease check": lambda: still_mine(list(JobRun.objects.filter(id__in=running)), owner="me"),
    }[what]
    for sql, read in plans_of(call):
        if "jobs_jobrun" not in sql:
            continue
        assert not read & STATUS_INDEXES, (sql, read)


def _generic_plan(sql: str, params, marker: str) -> tuple[bool, set[str]]:
    """Run `sql` through apps/core/prepared.py's cursor, then read the generic plan PostgreSQL
    may switch the prepared statement to after five executions. Returns (was it prepared, the
    indexes that plan reads). Rolled back."""
    with transaction.atomic():
        with prepared_cursor() as cursor:
            cursor.execute(sql, params)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT name FROM pg_prepared_statements WHERE NOT from_sql AND statement LIKE %s", [f"%{marker}%"]
            )
            found = cursor.fetchone()
            if found is None:
                transaction.set_rollback(True)
                return False, set()
            if isinstance(params, dict):  # psycopg numbers %(name)s by first appearance
                names = list(dict.fromkeys(re.findall(r"%\((\w+)\)s", sql)))
                params = [params[name] for name in names]
            cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            placeholders = ", ".join(["%s"] * len(params))
            cursor.execute(f"EXPLAIN (FORMAT JSON) EXECUTE {found[0]}({placeholders})", params)
            read = indexes_in_plan(cursor.fetchone()[0])
        transaction.set_rollback(True)
    return True, read


def test_the_prepared_statements_generic_plans_still_read_the_primary_key(stale, settings):
    """apps/core/prepared.py prepares the hot path's statements by id; after five executions
    PostgreSQL may plan them once for any parameters (a generic plan). That plan must keep to the
    primary key as the custom plans above do."""
    settings.CHIME_DB_PREPARED_STATEMENTS = True
    running, queued = stale
    now = timezone.now()
    jobs = [str(j) for j in JobRun.objects.filter(id__in=running).values_list("definition_id", flat=True)]
    tenants = [str(t) for t in JobRun.objects.filter(id__in=running).values_list("tenant_id", flat=True)]
    by_id = {
        "succeed": (SUCCEED_MINE_SQL, [now, id_array(running), "me"], "SET status = 'succeeded', finished_at"),
        "claim": (
            CLAIM_FREE_SQL,
            {"ids": id_array(queued), "now": now, "owner": "me", "lease": timedelta(seconds=30)},
            "claimed AS",
        ),
        "peek": (PEEK_SQL, [id_array(queued)], "d.concurrency_policy"),
        "release": (
            RELEASE_FENCED_SQL,
            {"now": now, "ids": id_array(queued), "partitions": [0], "epochs": [1], "owner": "me"},
            "scheduler_schedulerlease",
        ),
    }
    for what, (sql, params, marker) in by_id.items():
        prepared, read = _generic_plan(sql, params, marker)
        assert prepared, f"{what}: not prepared"
        assert "jobs_jobrun_pkey" in read, (what, read)
        assert not read & STATUS_INDEXES, (what, read)
    # Prepared too (their tables are small here: a plan of them would say nothing of 10M jobs).
    lock_params = {"jobs": id_array(jobs), "touched": id_array([])}
    assert _generic_plan(LOCK_JOBS_SQL, lock_params, "consecutive_failures > 0")[0]
    assert _generic_plan(SECRETS_BY_TENANT_SQL, [id_array(tenants), now], "tenants_signingsecret")[0]


def test_prepared_statements_can_be_turned_off_for_a_pooler_that_cannot_carry_them(stale, settings):
    settings.CHIME_DB_PREPARED_STATEMENTS = False
    running, _ = stale
    sql = SUCCEED_MINE_SQL + "\n-- with prepared statements off"  # a text no earlier test prepared
    prepared, _ = _generic_plan(sql, [timezone.now(), id_array(running), "off"], "-- with prepared statements off")
    assert not prepared
    settings.CHIME_DB_PREPARED_STATEMENTS = True
    prepared, _ = _generic_plan(sql, [timezone.now(), id_array(running), "on"], "-- with prepared statements off")
    assert prepared, "the same statement with them on"
