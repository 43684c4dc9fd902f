"""The run's state machine: every allowed change of `JobRun.status`, as data, and the one place
that writes it.

Before this module the status was written in ~16 statements across five modules, each with its
own idea of which states it may leave; a writer that forgot its guard could, say, overwrite a run
the lease sweep had just dead-lettered. Now each change is an *event* of `TRANSITIONS` (which
states it leaves, which state it enters), and the only statements that write the status are
built here from that table: `UPDATE ... WHERE <the caller's rows> AND status IN (<the event's
sources>)`. A run in any other state is left alone and not counted, so a forbidden transition
cannot be written, whoever calls. `tests/jobs/test_transitions.py` walks every (state, event) pair
on PostgreSQL and scans `apps/` for status writes anywhere else; docs/architecture.md
(#the-runs-state-machine) shows the table, checked against this one by a test.

Runs are born, not moved, into `BIRTH_STATES` (the scheduler's and the API's inserts:
apps/jobs/planning.py, `job_trigger`, `job_backfill`); an insert is not a transition.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from django.db import connection
from django.db.models import CharField, F, Func, Q, QuerySet
from django.db.models.lookups import In

from apps.core.prepared import id_array, prepared_cursor
from apps.core.rows import RowLoader

from .models import ConcurrencyPolicy, JobDefinition, JobRun, RunStatus

S = RunStatus


class Event(StrEnum):
    RELEASE = "release"
    UNPUBLISH = "unpublish"
    CLAIM = "claim"
    SKIP = "skip"
    HAND_BACK = "hand_back"
    SUCCEED = "succeed"
    RETRY = "retry"
    DEAD_LETTER = "dead_letter"
    ABANDON = "abandon"
    REPLACE = "replace"
    CANCEL = "cancel"
    CANCEL_UNSTARTED = "cancel_unstarted"
    RESCHEDULE = "reschedule"
    REPLAY = "replay"


@dataclass(frozen=True)
class Transition:
    event: Event
    sources: tuple[str, ...]  # the states a run may be in for the event to move it
    target: str
    why: str  # who writes it, and when (the doc's table shows it)


BIRTH_STATES = (S.SCHEDULED, S.SKIPPED)

TRANSITIONS: dict[Event, Transition] = {
    t.event: t
    for t in (
        Transition(
            Event.RELEASE,
            (S.SCHEDULED, S.RETRYING),
            S.QUEUED,
            "scheduler: its time has come (available_at), under the partition lease",
        ),
        Transition(Event.UNPUBLISH, (S.QUEUED,), S.SCHEDULED, "scheduler: the broker refused the message"),
        Transition(Event.CLAIM, (S.QUEUED,), S.RUNNING, "worker: takes the lease, counts the attempt"),
        Transition(Event.SKIP, (S.QUEUED,), S.SKIPPED, "worker: concurrency_policy 'forbid', another run busy"),
        Transition(
            Event.HAND_BACK, (S.RUNNING,), S.QUEUED, "worker: claimed but not sent (shutdown); attempt uncharged"
        ),
        Transition(Event.SUCCEED, (S.RUNNING,), S.SUCCEEDED, "worker: the endpoint answered 2xx"),
        Transition(
            Event.RETRY, (S.RUNNING,), S.RETRYING, "worker: retryable outcome; lease sweep: worker lost, attempts left"
        ),
        Transition(
            Event.DEAD_LETTER,
            (S.RUNNING,),
            S.FAILED,
            "worker: final outcome or request not buildable; lease sweep: worker lost on the last attempt",
        ),
        Transition(Event.ABANDON, (S.RUNNING,), S.CANCELLED, "worker: job paused or deleted before sending"),
        Transition(
            Event.REPLACE,
            (S.RUNNING, S.RETRYING),
            S.CANCELLED,
            "worker: a new run of a concurrency_policy 'replace' job is claimed",
        ),
        Transition(
            Event.CANCEL,
            (S.SCHEDULED, S.QUEUED, S.RETRYING, S.RUNNING),
            S.CANCELLED,
            "API: cancel a run that has not finished",
        ),
        Transition(
            Event.CANCEL_UNSTARTED,
            (S.SCHEDULED, S.QUEUED, S.RETRYING),
            S.CANCELLED,
            "API/dashboard: the job is deleted",
        ),
        Transition(
            Event.RESCHEDULE,
            (S.SCHEDULED, S.QUEUED),
            S.CANCELLED,
            "API/dashboard: the job's schedule changed (its scheduled runs only)",
        ),
        Transition(Event.REPLAY, (S.FAILED,), S.SCHEDULED, "API/dashboard/admin: replay a dead letter"),
    )
}


def allowed_pairs() -> set[tuple[str, str]]:
    """Every (from, to) the table allows, whatever the event."""
    return {(source, t.target) for t in TRANSITIONS.values() for source in t.sources}


def _guard(event: Event) -> dict:
    sources = TRANSITIONS[event].sources
    return {"status": sources[0]} if len(sources) == 1 else {"status__in": sources}


class _Unindexed(Func):
    """`(status || '')`: the same text, in a form no partial index's predicate matches (below)."""

    template = "(%(expressions)s || '')"
    output_field = CharField()


def status_fenced(*states: str) -> Q:
    """`status IN (states)` for a query that also picks its runs by id, written so that the
    planner takes the primary key and no partial index on `status` (`_sql_in(fenced=True)` says
    why, with the numbers). The ORM's form of the fence, for every query by id here and in
    apps/delivery; tests/jobs/test_fenced_plans.py reads their plans."""
    return Q(In(_Unindexed(F("status")), list(states)))


def picked(run_ids, *states: str) -> QuerySet:
    """The runs among `run_ids` that are in one of `states` (fenced: found by primary key)."""
    return JobRun.objects.filter(status_fenced(*states), id__in=list(run_ids))


# The events that end a run or an attempt, as the `outcome` of the chime_runs_total metric.
OUTCOMES: dict[Event, str] = {
    Event.SUCCEED: "succeeded",
    Event.RETRY: "retried",
    Event.DEAD_LETTER: "failed",
    Event.SKIP: "skipped",
    Event.ABANDON: "cancelled",
    Event.REPLACE: "cancelled",
    Event.CANCEL: "cancelled",
    Event.CANCEL_UNSTARTED: "cancelled",
    Event.RESCHEDULE: "cancelled",
}


def move(event: Event, runs, *, where: dict | None = None, **fields) -> int:
    """Apply `event` to `runs` (ids, or a JobRun queryset) that are in one of its source states,
    also setting `fields`; `where` narrows the rows further (e.g. `lease_owner`). Returns how many
    moved: runs in any other state are left as they are and not counted.

    An event that is an outcome (OUTCOMES) is counted in chime_runs_total once its transaction
    commits, by the priority (and tenant) of each run it moved: the UPDATE returns them."""
    # Picked by id: the guard fenced, as every query by id is (status_fenced).
    rows = runs.filter(**_guard(event)) if isinstance(runs, QuerySet) else picked(runs, *TRANSITIONS[event].sources)
    if where:
        rows = rows.filter(**where)
    if event not in OUTCOMES:
        return rows.update(status=TRANSITIONS[event].target, **fields)
    moved = _update_returning(rows, {"status": TRANSITIONS[event].target, **fields})
    runs_ended(OUTCOMES[event], moved)
    return len(moved)


def _update_returning(rows: QuerySet, values: dict) -> list[tuple]:
    """`rows.update(**values)`, returning (priority, tenant_id) of each row updated: Django's
    own UPDATE statement with a RETURNING clause (PostgreSQL, and SQLite from 3.35)."""
    from django.core.exceptions import EmptyResultSet
    from django.db.models.sql.subqueries import UpdateQuery

    query = rows.query.chain(UpdateQuery)
    query.add_update_values(values)
    compiler = query.get_compiler(rows.db)
    try:
        compiler.pre_sql_setup()  # as SQLUpdateCompiler.execute_sql does: joins become an id subquery
        sql, params = compiler.as_sql()
    except EmptyResultSet:  # e.g. id__in=[]: nothing to update (Django's update() returns 0)
        return []
    if not sql:
        return []
    with connection.cursor() as cursor:
        cursor.execute(f"{sql} RETURNING priority, tenant_id", params)
        return cursor.fetchall()


def runs_ended(outcome: str, moved) -> None:
    """Count (priority, tenant_id) pairs as runs with `outcome`, when the transaction commits."""
    from django.db import transaction

    from apps.metrics.registry import count_runs

    if moved:
        transaction.on_commit(lambda rows=list(moved): count_runs(outcome, rows))


def _sql_in(event: Event, *, fenced: bool = False, alias: str = "") -> str:
    """The event's guard as SQL text; the values are this module's constants, never input.

    `fenced`: for statements that pick their rows by id (`id = ANY(...)`), the guard written so
    that no partial index on `status` can serve it, and the planner takes the primary key. With
    statistics from a quiet moment (few runs releasable: what ANALYZE sees most of the time), the
    planner reads `id = ANY(200 ids) AND status IN ('scheduled', 'retrying')` as a scan of the
    whole of jobrun_tenant_releasable_idx filtered by id, because it believes that index nearly
    empty: at a 100,000 spike, 75,000 rows and 70,000 buffers, ~200 ms per release flip (EXPLAIN
    ANALYZE, docs/benchmarks.md), against 200 primary-key probes. `(status || '')` means the same
    and matches no index predicate (the due index's fence, apps/jobs/models.py, is the mirror).
    """
    return _states_in(TRANSITIONS[event].sources, fenced=fenced, alias=alias)


def _states_in(states, *, fenced: bool, alias: str) -> str:
    column = f"{alias}.status" if alias else "status"
    column = f"({column} || '')" if fenced else column
    return "{} IN ({})".format(column, ", ".join(f"'{RunStatus(s)}'" for s in states))


def status_fenced_sql(*states: str, alias: str = "") -> str:
    """`status_fenced` as SQL text, for fixed statements elsewhere that pick runs by id."""
    return _states_in(states, fenced=True, alias=alias)


# The scheduler's release, fenced by its partition leases: a run is flipped only if, at that very
# write (clock_timestamp()), the process still holds its partition's lease at the epoch it
# acquired it (docs/architecture.md#sharding). Rows another scheduler has locked are skipped.
RELEASE_FENCED_SQL = f"""
UPDATE jobs_jobrun AS r
   SET status = '{TRANSITIONS[Event.RELEASE].target}', queued_at = %(now)s
  FROM (SELECT id FROM jobs_jobrun
         WHERE id = ANY(%(ids)s::uuid[]) AND {_sql_in(Event.RELEASE, fenced=True)}
         FOR UPDATE SKIP LOCKED) AS due
 WHERE r.id = due.id
   AND EXISTS (
       SELECT 1 FROM scheduler_schedulerlease AS l
         JOIN unnest(%(partitions)s::int[], %(epochs)s::bigint[]) AS h(partition, epoch)
           ON h.partition = l.partition AND h.epoch = l.epoch
        WHERE l.partition = r.partition AND l.owner = %(owner)s AND l.expires_at > clock_timestamp())
RETURNING r.id::text, r.priority, r.tenant_id::text
"""  # noqa: S608 (the interpolated text is this module's constants)


def release_fenced(run_ids: list, *, now: datetime, partitions: list[int], epochs: list[int], owner: str) -> list:
    """PostgreSQL: `release` for the runs still releasable whose partition lease (`owner`, at
    `epochs[i]` for `partitions[i]`) still holds; returns (id, priority, tenant_id) of each run
    moved, the ids as text: all the scheduler does with them next is write them into the Celery
    message and the live events, and a uuid parsed from the row only to be turned back into text
    cost ~3 µs per run of its CPU (issue #12)."""
    params = {"now": now, "ids": id_array(run_ids), "partitions": partitions, "epochs": epochs, "owner": owner}
    with prepared_cursor() as cursor:
        cursor.execute(RELEASE_FENCED_SQL, params)
        return cursor.fetchall()


# The worker's recording of successes, in the round trip that also locks them (PostgreSQL): the
# runs still `running` under this lease are finished, and RETURNING says which were the caller's
# (apps/delivery/outcomes.py judges only the others after reading them).
SUCCEED_MINE_SQL = f"""
UPDATE jobs_jobrun SET status = '{TRANSITIONS[Event.SUCCEED].target}', finished_at = %s, status_reason = '',
       lease_owner = '', lease_expires_at = NULL
 WHERE id = ANY(%s::uuid[]) AND {_sql_in(Event.SUCCEED, fenced=True)} AND lease_owner = %s
RETURNING id, priority, tenant_id"""  # noqa: S608 (the interpolated text is this module's constants)


def succeed_mine(run_ids: list, *, now: datetime, owner: str) -> set:
    """PostgreSQL: `succeed` for the runs still in its source state under lease `owner`, clearing
    the lease; returns the ids moved (counted as succeeded on commit, as `move` counts)."""
    if not run_ids:
        return set()
    with prepared_cursor() as cursor:
        cursor.execute(SUCCEED_MINE_SQL, [now, id_array(run_ids), owner])
        rows = cursor.fetchall()
    runs_ended(OUTCOMES[Event.SUCCEED], [(priority, tenant_id) for _, priority, tenant_id in rows])
    return {row[0] for row in rows}


# The worker's claim of runs whose job allows concurrent runs (apps/delivery/claiming.py), in one
# statement: lock the runs still `queued` (skipping those another claim holds, in id order), flip
# them to `running` under the lease, and return each with its job. Runs of a job with another
# concurrency policy are left for the claim that locks the job first (the lock order).
# Only the columns delivery reads are returned: the request (apps/delivery/preparing.py), the
# attempt and the outcome with its backoff (outcomes.py), the metrics, the logs and the trace. The
# rest stay deferred (RowLoader); all of them cost ~45 µs per run on this machine against ~25 for
# these (a scratch script: 20,000 runs fetched 100 at a time, the client's CPU), the job's
# timestamps and texts for nothing. tests/delivery/test_claim_columns.py delivers every outcome
# and fails if any of the deferred fields is read.
CLAIMED_RUN_FIELDS = (
    "id",
    "tenant_id",
    "definition_id",
    "partition",
    "priority",
    "scheduled_for",
    "trigger",
    "status",
    "attempt_count",
    "attempts_before_replay",
    "lease_owner",
    "lease_expires_at",
    "started_at",
)
CLAIMED_JOB_FIELDS = (
    "id",
    "tenant_id",
    "name",
    "partition",
    "priority",
    "status",
    "concurrency_policy",
    "target_url",
    "target_method",
    "target_headers",
    "target_body",
    "timeout_seconds",
    "secret_header_names",
    "retry_max_attempts",
    "retry_initial_backoff_seconds",
    "retry_max_backoff_seconds",
)
_RUNS, _JOBS = RowLoader(JobRun, CLAIMED_RUN_FIELDS), RowLoader(JobDefinition, CLAIMED_JOB_FIELDS)
CLAIM_FREE_SQL = f"""
WITH claimed AS (
    UPDATE jobs_jobrun AS r
       SET status = '{TRANSITIONS[Event.CLAIM].target}', attempt_count = r.attempt_count + 1,
           started_at = %(now)s, lease_owner = %(owner)s, lease_expires_at = statement_timestamp() + %(lease)s
      FROM (SELECT q.id FROM jobs_jobrun AS q JOIN jobs_jobdefinition AS j ON j.id = q.definition_id
             WHERE q.id = ANY(%(ids)s::uuid[]) AND {_sql_in(Event.CLAIM, fenced=True, alias="q")}
               AND j.concurrency_policy = '{ConcurrencyPolicy.ALLOW}'
             ORDER BY q.id FOR UPDATE OF q SKIP LOCKED) AS free
     WHERE r.id = free.id
    RETURNING {_RUNS.columns("r")}
)
SELECT {_RUNS.columns("claimed")}, {_JOBS.columns("d")}
  FROM claimed JOIN jobs_jobdefinition AS d ON d.id = claimed.definition_id
 ORDER BY claimed.scheduled_for"""  # noqa: S608 (the interpolated text is this module's constants)


def claim_free(run_ids: list, *, now: datetime, owner: str, lease: timedelta) -> list[JobRun]:
    """PostgreSQL: `claim` for the runs still `queued` whose job's concurrency policy is `allow`;
    returns them as they are now (`running` under `owner`), each with its `definition` loaded
    (the fields delivery reads: CLAIMED_RUN_FIELDS, CLAIMED_JOB_FIELDS; the others deferred)."""
    if not run_ids:
        return []
    with prepared_cursor() as cursor:
        cursor.execute(CLAIM_FREE_SQL, {"ids": id_array(run_ids), "now": now, "owner": owner, "lease": lease})
        rows = cursor.fetchall()
    runs = _RUNS.load_many(rows)
    for run, job in zip(runs, _JOBS.load_many(rows, start=len(_RUNS)), strict=True):
        # Into the relation's cache, as select_related does (the descriptor's __set__ also asks
        # the database router about the pair and sets definition_id again: ~1 % of the worker).
        JobRun.definition.field.set_cached_value(run, job)
    return runs
