"""What PostgreSQL spends writing a run's row through its life, with jobs_jobrun's index set and
with one whose status changes can be HOT updates (issue #12, docs/scaling.md item 1).

A run's row is inserted, then updated three times on the delivery path: release (`queued`), claim
(`running`, the lease) and outcome (`succeeded`). With today's indexes none of those updates is HOT:
PostgreSQL refuses a HOT update when a changed column appears in any index, predicates included,
and several partial indexes name `status`. Each update then adds an entry to every index whose
predicate the new version meets. The alternative measured here:

- **current**: `CREATE TABLE ... (LIKE jobs_jobrun INCLUDING ALL)`, the table exactly as the
  migrations leave it (read from the migrated bench database, so it follows the model).
- **hot**: the same columns, plus a `dead_lettered` flag. The two dead-letter indexes' predicates
  use that flag instead of the status. The due and releasable indexes are partial on
  `finished_at IS NULL`, so a run stays in them while in flight. There is no index for queued
  runs or for running runs: the recovery sweeps would read the in-flight set from the due index.
  Release and claim then change no indexed column and can be HOT, given room on the page (the
  `fillfactor`); the outcome sets `finished_at` and is not HOT.

Both designs take the same statements, in the shape Chime's hot path uses them: rows inserted from
arrays, 1,000 at a time (apps/jobs/planning.py). Runs are released 200 at a time by id, under a row
lock that skips locked rows (RELEASE_FENCED_SQL without its lease check); a release runs while
fewer than 2,000 are queued (CHIME_MAX_QUEUED_RUNS). They are claimed 100 at a time (CLAIM_FREE_SQL
without its job join) and recorded as succeeded two claims later (SUCCEED_MINE_SQL). Every
statement commits on its own. The cost is each backend's CPU from /proc (the scheduler's
connection for insert and release, the worker's for claim and outcome), per run.

Not measured: choosing which runs to release. The fair release (apps/scheduler/fairness.py) reads
the releasable index, and under the hot design that index also holds every in-flight run for
the release to skip: a cost against the design that this bench does not count. Also not measured:
the recovery sweeps reading in-flight runs without their own indexes.

A second table compares an attempt's COPY (apps/delivery/outcomes.py) with all nine request
headers Chime sends (what an attempt stored until issue #12's fourteenth session), with those it
stores now (less the six derived from the run and its number: apps/jobs/attempt_headers.py), and
with none.

    .venv/bin/python -m bench.row_designs --runs 60000 --rounds 2
"""

from __future__ import annotations

import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable as `python bench/x.py` too

from psycopg.types.json import Jsonb

from apps.core.ids import uuid7
from apps.jobs.attempt_headers import stored_headers, utc_text
from bench.common import BENCH_DSN, Report, base_parser, ensure_database, log, pg_connect, table
from bench.pgcost import own_cpu

AT = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)  # the attempts' Chime-Scheduled-For
QUEUE_CAP = 2000  # CHIME_MAX_QUEUED_RUNS' default
RELEASE_BATCH, CLAIM_BATCH, INSERT_BATCH = 200, 100, 1000

HOT_INDEXES = """
ALTER TABLE {t} ADD PRIMARY KEY (id);
ALTER TABLE {t} ADD CONSTRAINT {t}_occurrence UNIQUE (definition_id, scheduled_for);
CREATE INDEX ON {t} (tenant_id, created_at DESC);
CREATE INDEX ON {t} (available_at, partition) WHERE finished_at IS NULL;
CREATE INDEX ON {t} (tenant_id, priority, available_at) WHERE finished_at IS NULL;
CREATE INDEX ON {t} (tenant_id, finished_at DESC, created_at DESC) WHERE dead_lettered;
CREATE INDEX ON {t} (tenant_id, id DESC) WHERE dead_lettered
"""
INSERT = """INSERT INTO {t} (id, tenant_id, definition_id, partition, priority, scheduled_for, trigger, status,
    status_reason, available_at, attempt_count, attempts_before_replay, lease_owner, created_at)
SELECT i, t, d, 0, 'default', %(at)s, 'schedule', 'scheduled', '', %(at)s, 0, 0, '', now()
  FROM unnest(%(ids)s::uuid[], %(tenants)s::uuid[], %(definitions)s::uuid[]) AS u(i, t, d)"""
RELEASE = """UPDATE {t} AS r SET status = 'queued', queued_at = %(now)s
  FROM (SELECT id FROM {t} WHERE id = ANY(%(ids)s::uuid[]) AND (status || '') IN ('scheduled', 'retrying')
         FOR UPDATE SKIP LOCKED) AS due
 WHERE r.id = due.id"""
CLAIM = """UPDATE {t} AS r SET status = 'running', attempt_count = r.attempt_count + 1, started_at = %(now)s,
       lease_owner = 'bench', lease_expires_at = statement_timestamp() + interval '5 minutes'
  FROM (SELECT id FROM {t} WHERE id = ANY(%(ids)s::uuid[]) AND (status || '') = 'queued'
         ORDER BY id FOR UPDATE SKIP LOCKED) AS free
 WHERE r.id = free.id"""
SUCCEED = """UPDATE {t} SET status = 'succeeded', finished_at = %(now)s, status_reason = '', lease_owner = '',
       lease_expires_at = NULL
 WHERE id = ANY(%(ids)s::uuid[]) AND (status || '') = 'running' AND lease_owner = 'bench'"""


def create(conn, name: str, design: str, fillfactor: int) -> None:
    conn.execute(f"DROP TABLE IF EXISTS {name}")
    if design == "current":
        conn.execute(f"CREATE TABLE {name} (LIKE jobs_jobrun INCLUDING ALL) WITH (fillfactor = {fillfactor})")
        return
    conn.execute(
        f"CREATE TABLE {name} (LIKE jobs_jobrun INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
        f" WITH (fillfactor = {fillfactor})"
    )
    conn.execute(f"ALTER TABLE {name} ADD COLUMN dead_lettered boolean NOT NULL DEFAULT false")
    for statement in HOT_INDEXES.format(t=name).split(";"):
        conn.execute(statement)


class Meter:
    """CPU seconds of one connection's backend, by stage."""

    def __init__(self, conn):
        self.conn, self.pid = conn, conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        self.spent: dict[str, float] = {}

    def run(self, stage: str, sql: str, params: dict) -> int:
        before = own_cpu(self.pid)
        rows = self.conn.execute(sql, params, prepare=True).rowcount
        self.spent[stage] = self.spent.get(stage, 0.0) + own_cpu(self.pid) - before
        return rows


def life(variant: str, runs: int, dsn: str = BENCH_DSN) -> dict:
    """Insert `runs` runs due now, then release, claim and succeed them all as the pipeline does."""
    design, fillfactor = variant.split("@")
    name = f"bench_rows_{design}"
    with pg_connect(dsn) as admin:
        create(admin, name, design, int(fillfactor))
    scheduler, worker = pg_connect(dsn), pg_connect(dsn)
    sched, work = Meter(scheduler), Meter(worker)
    due = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    tenants = [uuid.uuid4() for _ in range(100)]
    ids = [uuid7() for _ in range(runs)]
    for start in range(0, runs, INSERT_BATCH):
        chunk = ids[start : start + INSERT_BATCH]
        params = {
            "at": due,
            "ids": chunk,
            "tenants": [tenants[hash(i) % 100] for i in chunk],
            "definitions": [uuid.uuid4() for _ in chunk],
        }
        sched.run("insert", INSERT.format(t=name), params)
    to_release, queued, claimed, done = list(ids), [], [], 0
    while done < runs:
        now = datetime.now(UTC)
        if to_release and len(queued) < QUEUE_CAP:
            batch, to_release = to_release[:RELEASE_BATCH], to_release[RELEASE_BATCH:]
            sched.run("release", RELEASE.format(t=name), {"now": now, "ids": batch})
            queued += batch
            continue
        if queued:
            batch, queued = queued[:CLAIM_BATCH], queued[CLAIM_BATCH:]
            work.run("claim", CLAIM.format(t=name), {"now": now, "ids": batch})
            claimed.append(batch)
        if len(claimed) > 2 or (claimed and not queued and not to_release):
            batch = claimed.pop(0)
            done += work.run("succeed", SUCCEED.format(t=name), {"now": now, "ids": batch})
    scheduler.close()
    worker.close()
    with pg_connect(dsn) as conn:
        updates, hot = table_updates(conn, name, expected=3 * runs)
        heap, indexes = conn.execute("SELECT pg_relation_size(%s), pg_indexes_size(%s)", [name, name]).fetchone()
        conn.execute(f"DROP TABLE {name}")
    spent = {**sched.spent, **work.spent}
    return {
        "variant": variant,
        **{stage: spent.get(stage, 0.0) * 1e6 / runs for stage in ("insert", "release", "claim", "succeed")},
        "total": sum(spent.values()) * 1e6 / runs,
        "succeeded": done,
        "hot": hot / updates if updates else 0.0,
        "heap_mb": heap / 2**20,
        "index_mb": indexes / 2**20,
    }


def table_updates(conn, name: str, *, expected: int, wait: float = 60.0) -> tuple[int, int]:
    """(rows updated, of which HOT) in `name`, once the statistics show `expected` updates: each
    backend reports its counts when it exits, asynchronously to the client's close. Counts short
    of `expected` are an error, not a result: with one backend's counts and not the other's the
    HOT share would be a different number (the release's updates are the scheduler's, the
    claim's and the outcome's the worker's)."""
    deadline = time.monotonic() + wait
    while True:
        updates, hot = conn.execute(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = %s", [name]
        ).fetchone()
        if updates >= expected:
            return updates, hot
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name}: the statistics show {updates} updates after {wait:.0f} s, not {expected}")
        time.sleep(0.05)
        conn.execute("SELECT pg_stat_clear_snapshot()")


def headers(run_id: str) -> dict[str, str]:
    """What the worker sends for a job without headers of its own (apps/delivery/preparing.py),
    signature aside: what an attempt stored until the derived ones were left out."""
    return {
        "Content-Type": "application/json",
        "Idempotency-Key": run_id,
        "Chime-Run-Id": run_id,
        "Chime-Job-Id": str(uuid.uuid4()),
        "Chime-Attempt": "1",
        "Chime-Scheduled-For": utc_text(AT),
        "webhook-id": run_id,
        "webhook-timestamp": "1796634000",
        "traceparent": f"00-{run_id.replace('-', '')}-0123456789abcdef-01",
    }


def attempts(variant: str, runs: int, dsn: str = BENCH_DSN) -> dict:
    """COPY `runs` attempts, 50 per transaction, with request headers: all nine that Chime sends
    ("all"), those an attempt stores ("stored": less the six derived from the run and number,
    apps/jobs/attempt_headers.py), or none."""
    columns = "id, run_id, number, started_at, finished_at, status_code, error, error_kind, duration_ms,"
    columns += " response_excerpt, request_headers, worker"
    with pg_connect(dsn) as conn:
        conn.execute("DROP TABLE IF EXISTS bench_attempts")
        conn.execute("CREATE TABLE bench_attempts (LIKE jobs_runattempt INCLUDING ALL)")
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        now = datetime.now(UTC)
        rows = []
        for _ in range(runs):
            run_id = uuid7()
            sent = headers(str(run_id))
            if variant == "stored":  # as apps/delivery/outcomes.py stores them now
                job_id = uuid.UUID(sent["Chime-Job-Id"])
                sent = stored_headers(sent, run_id=run_id, job_id=job_id, attempt=1, scheduled_for=AT)
            stored = Jsonb(sent if variant in ("all", "stored") else {})
            rows.append((uuid7(), run_id, 1, now, now, 200, "", "", 3, "ok", stored, "host:1234:abcdef"))
        backend, client = own_cpu(pid), time.process_time()
        for start in range(0, runs, 50):
            with conn.transaction(), conn.cursor().copy(f"COPY bench_attempts ({columns}) FROM STDIN") as copy:
                for row in rows[start : start + 50]:
                    copy.write_row(row)
        backend, client = own_cpu(pid) - backend, time.process_time() - client
        size = conn.execute("SELECT pg_total_relation_size('bench_attempts')").fetchone()[0]
        conn.execute("DROP TABLE bench_attempts")
    return {"variant": variant, "backend": backend * 1e6 / runs, "client": client * 1e6 / runs, "bytes": size}


def main() -> None:
    parser = base_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=60_000)
    parser.add_argument("--rounds", type=int, default=2, help="rounds of every variant, interleaved")
    parser.add_argument(
        "--variants", default="current@100,hot@100,hot@70,hot@50", help="DESIGN@FILLFACTOR, comma-separated"
    )
    args = parser.parse_args()
    runs = 10_000 if args.quick else args.runs
    if not args.no_setup:
        ensure_database()
    report = Report("Row designs: a run's row writes, current indexes against HOT status updates", args.md)
    lives, copies = [], []
    for round_ in range(args.rounds):
        for variant in args.variants.split(","):
            log(f"row designs: {variant}, {runs:,} runs, round {round_ + 1}")
            lives.append(life(variant, runs))
        for variant in ("all", "stored", "none"):
            copies.append(attempts(variant, runs))
    report.add(
        f"{runs:,} runs per variant, {args.rounds} rounds interleaved; PostgreSQL backend CPU per run, µs "
        "(the scheduler's connection: insert, release; the worker's: claim, succeed):\n"
    )
    report.add(
        table(
            ["variant", "insert", "release", "claim", "succeed", "total", "HOT updates", "heap MB", "indexes MB"],
            [
                [
                    r["variant"],
                    *(f"{r[k]:.1f}" for k in ("insert", "release", "claim", "succeed", "total")),
                    f"{r['hot']:.0%}",
                    f"{r['heap_mb']:.0f}",
                    f"{r['index_mb']:.0f}",
                ]
                for r in lives
            ],
        )
    )
    report.add("\nAn attempt's COPY, 50 per transaction (µs per attempt; client = this process's CPU):\n")
    report.add(
        table(
            ["request headers", "backend", "client", "bytes per attempt (table + indexes)"],
            [[r["variant"], f"{r['backend']:.1f}", f"{r['client']:.1f}", f"{r['bytes'] / runs:.0f}"] for r in copies],
        )
    )
    report.save()


if __name__ == "__main__":
    main()
