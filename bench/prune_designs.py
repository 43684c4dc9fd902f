"""Scratch experiment for issue 14: prune one day of run history, two designs, same data.

- **flat**: jobs_jobrun / jobs_runattempt as they are (the model's indexes, the unique
  (definition_id, scheduled_for) key, RunAttempt.run_id -> JobRun.id), pruned the way
  apps/history does it: per tenant, batches of --batch runs of one day, each batch one short
  transaction deleting its attempts and its runs by primary key.
- **part**: the same columns, declaratively partitioned by RANGE (scheduled_for), one partition a
  day. scheduled_for is the only partition key that keeps the unique (definition_id,
  scheduled_for) key global (a unique key must contain the partition key), so the primary key
  becomes (id, scheduled_for), attempts carry run_scheduled_for and are partitioned the same way,
  and their foreign key is (run_id, run_scheduled_for). One day goes with DETACH PARTITION
  CONCURRENTLY + DROP TABLE (attempts' partition first: the FK forbids the other order).

Both tables hold --runs runs over --days days (100 tenants, 10,000 definitions, one attempt a
run), loaded with INSERT ... SELECT generate_series in the database `CHIME_BENCH_DB`
(default chime_history_bench), which the script creates and drops. It reports, for the oldest day:
the wall time of the prune or the detach+drop, its slowest single transaction (how long any lock
is held), the WAL this database wrote (pg_walinspect, as bench/pgcost.py), and the p50/p99/max of a
concurrent probe doing the scheduler's and the worker's hot statements (insert-on-conflict of a
new run, lookup of a run by id) while it runs; then the same hot statements' latency with no prune
running, on each design (what partitioning costs every request).

    CHIME_BENCH_DB=chime_history_bench .venv/bin/python -m bench.prune_designs --runs 3000000 --days 30
"""

# ruff: noqa: S608 - every statement is built from this file's constants and numbers, never from input

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import threading
import time
from datetime import UTC, datetime, timedelta

import psycopg

from bench.pgcost import WalCounter

DB = os.environ.get("CHIME_BENCH_DB", "chime_history_bench")
ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
DSN = f"postgresql://postgres@127.0.0.1:5432/{DB}"
TENANTS = 100
DEFINITIONS = 10_000
BASE = datetime(2026, 1, 1, tzinfo=UTC)

COLUMNS = """
    id uuid NOT NULL, tenant_id uuid NOT NULL, definition_id uuid NOT NULL, partition smallint NOT NULL,
    priority varchar(8) NOT NULL, scheduled_for timestamptz NOT NULL, trigger varchar(16) NOT NULL,
    status varchar(16) NOT NULL, status_reason varchar(500) NOT NULL, available_at timestamptz NOT NULL,
    attempt_count integer NOT NULL, attempts_before_replay integer NOT NULL, coalesced_count integer,
    coalesced_first_at timestamptz, coalesced_last_at timestamptz, lease_owner varchar(200) NOT NULL,
    lease_expires_at timestamptz, created_at timestamptz NOT NULL, queued_at timestamptz,
    started_at timestamptz, finished_at timestamptz
"""
ATTEMPT_COLUMNS = """
    id uuid NOT NULL, run_id uuid NOT NULL, number integer NOT NULL, started_at timestamptz NOT NULL,
    finished_at timestamptz, status_code integer, error varchar(1000) NOT NULL, error_kind varchar(16) NOT NULL,
    duration_ms integer, response_excerpt text NOT NULL, request_headers jsonb NOT NULL, worker varchar(200) NOT NULL
"""


def uuid7_sql(ts: str, salt: str) -> str:
    """A UUIDv7-shaped id in SQL: 48 bits of the time in ms, then hash bits (time-ordered like uuid7)."""
    return (
        f"(lpad(to_hex(floor(extract(epoch from {ts}) * 1000)::bigint), 12, '0') || '7' "
        f"|| substr(md5({salt}), 1, 3) || '8' || substr(md5({salt}), 4, 15))::uuid"
    )


def indexes(table: str, *, pk: str, unique: str) -> list[str]:
    """The model's indexes (apps/jobs/models.py JobRun.Meta), on `table`."""
    return [
        f"ALTER TABLE {table} ADD PRIMARY KEY ({pk})",
        f"ALTER TABLE {table} ADD CONSTRAINT {table}_unique_occurrence UNIQUE ({unique})",
        f"CREATE INDEX {table}_releasable ON {table} (available_at, partition) "
        "WHERE status IN ('scheduled', 'retrying')",
        f"CREATE INDEX {table}_tenant_releasable ON {table} (tenant_id, priority, available_at) "
        "WHERE status IN ('scheduled', 'retrying')",
        f"CREATE INDEX {table}_queued ON {table} (priority, queued_at) WHERE status = 'queued'",
        f"CREATE INDEX {table}_running ON {table} (lease_expires_at) WHERE status = 'running'",
        f"CREATE INDEX {table}_tenant_created ON {table} (tenant_id, created_at DESC)",
    ]


def run_select(n: int, days: int) -> str:
    """Run i: tenant i % 100, definition i % 10,000, spread evenly over the days (created = fired)."""
    seconds = days * 86400
    ts = f"(timestamptz '{BASE.isoformat()}' + (i::float8 * {seconds} / {n}) * interval '1 second')"
    return f"""
        SELECT {uuid7_sql(ts, "'r' || i")}, md5('t' || (i % {TENANTS}))::uuid, md5('d' || (i % {DEFINITIONS}))::uuid,
               (i % 64)::smallint, 'default', {ts}, 'schedule',
               CASE WHEN i % 20 = 0 THEN 'failed' WHEN i % 20 = 1 THEN 'skipped' ELSE 'succeeded' END, '',
               {ts}, 1, 0, NULL, NULL, NULL, '', NULL, {ts}, {ts}, {ts}, {ts} + interval '1 second'
        FROM generate_series(0, {n - 1}) AS i"""


def attempt_values(run: str) -> str:
    attempt_id = uuid7_sql(f"{run}.created_at", f"'a' || {run}.id")
    return (
        f"{attempt_id}, {run}.id, 1, {run}.started_at, {run}.finished_at, "
        f"200, '', '', 35, 'ok', '{{\"webhook-id\": \"x\", \"content-type\": \"application/json\"}}', 'worker-1'"
    )


def load(conn, *, runs: int, days: int) -> dict:
    timings = {}
    t = time.perf_counter()
    conn.execute(f"CREATE TABLE flat_run ({COLUMNS})")
    conn.execute(f"CREATE TABLE flat_attempt ({ATTEMPT_COLUMNS})")
    conn.execute(f"INSERT INTO flat_run {run_select(runs, days)}")
    conn.execute(f"INSERT INTO flat_attempt SELECT {attempt_values('r')} FROM flat_run r")
    for statement in indexes("flat_run", pk="id", unique="definition_id, scheduled_for"):
        conn.execute(statement)
    conn.execute("ALTER TABLE flat_attempt ADD PRIMARY KEY (id)")
    conn.execute("ALTER TABLE flat_attempt ADD CONSTRAINT flat_attempt_unique_number UNIQUE (run_id, number)")
    conn.execute(
        "ALTER TABLE flat_attempt ADD FOREIGN KEY (run_id) REFERENCES flat_run (id) DEFERRABLE INITIALLY DEFERRED"
    )
    timings["flat load s"] = round(time.perf_counter() - t, 1)

    t = time.perf_counter()
    conn.execute(f"CREATE TABLE part_run ({COLUMNS}) PARTITION BY RANGE (scheduled_for)")
    conn.execute(
        f"CREATE TABLE part_attempt ({ATTEMPT_COLUMNS}, run_scheduled_for timestamptz NOT NULL) "
        "PARTITION BY RANGE (run_scheduled_for)"
    )
    for day in range(days + 2):  # +2: today's and tomorrow's partitions exist before their runs
        start, end = BASE + timedelta(days=day), BASE + timedelta(days=day + 1)
        for table in ("part_run", "part_attempt"):
            conn.execute(
                f"CREATE TABLE {table}_{start:%Y%m%d} PARTITION OF {table} "
                f"FOR VALUES FROM ('{start.isoformat()}') TO ('{end.isoformat()}')"
            )
    conn.execute(f"INSERT INTO part_run {run_select(runs, days)}")
    conn.execute(f"INSERT INTO part_attempt SELECT {attempt_values('r')}, r.scheduled_for FROM part_run r")
    for statement in indexes("part_run", pk="id, scheduled_for", unique="definition_id, scheduled_for"):
        conn.execute(statement)
    conn.execute("ALTER TABLE part_attempt ADD PRIMARY KEY (id, run_scheduled_for)")
    conn.execute("ALTER TABLE part_attempt ADD UNIQUE (run_id, number, run_scheduled_for)")
    conn.execute(
        "ALTER TABLE part_attempt ADD FOREIGN KEY (run_id, run_scheduled_for) REFERENCES part_run (id, scheduled_for)"
    )
    timings["part load s"] = round(time.perf_counter() - t, 1)
    conn.execute("VACUUM ANALYZE")
    return timings


class Probe:
    """The hot statements in a loop on a connection of their own: a scheduler insert of a new
    occurrence (ON CONFLICT on the unique key, as materialize does) and a worker's lookup by id."""

    def __init__(self, design: str, ids: list, *, now: datetime):
        self.design, self.ids, self.now = design, ids, now
        self.insert_ms: list[float] = []
        self.lookup_ms: list[float] = []
        self.stamps: list[float] = []  # when each round ended: a gap is a stall, wherever it was
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.counter = 0

    def _run(self) -> None:
        table = f"{self.design}_run"
        with psycopg.connect(DSN, autocommit=True) as conn:
            while not self._stop.is_set():
                self.counter += 1
                when = self.now + timedelta(microseconds=self.counter)
                t = time.perf_counter()
                conn.execute(
                    f"INSERT INTO {table} (id, tenant_id, definition_id, partition, priority, scheduled_for, "
                    "trigger, status, status_reason, available_at, attempt_count, attempts_before_replay, "
                    "lease_owner, created_at) VALUES (gen_random_uuid(), md5('t1')::uuid, md5('d1')::uuid, 1, "
                    "'default', %s, 'schedule', 'scheduled', '', %s, 0, 0, '', %s) "
                    "ON CONFLICT (definition_id, scheduled_for) DO NOTHING",
                    [when, when, when],
                )
                self.insert_ms.append((time.perf_counter() - t) * 1000)
                t = time.perf_counter()
                conn.execute(f"SELECT status FROM {table} WHERE id = %s", [random.choice(self.ids)]).fetchone()
                self.lookup_ms.append((time.perf_counter() - t) * 1000)
                self.stamps.append(time.perf_counter())
                time.sleep(0.002)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(10)

    def summary(self) -> dict:
        gaps = [b - a for a, b in zip(self.stamps, self.stamps[1:], strict=False)]
        return {
            "insert": quantiles(self.insert_ms),
            "lookup by id": quantiles(self.lookup_ms),
            "longest stall ms": round(max(gaps, default=0) * 1000, 1),
        }

    def clear(self) -> None:
        """From now on; a round in flight counts its stall from here (not lost with the old stamps)."""
        self.insert_ms.clear()
        self.lookup_ms.clear()
        self.stamps[:] = [time.perf_counter()]


def quantiles(samples: list[float]) -> dict:
    if not samples:
        return {}
    ordered = sorted(samples)
    return {
        "n": len(ordered),
        "p50 ms": round(statistics.median(ordered), 3),
        "p99 ms": round(ordered[int(len(ordered) * 0.99) - 1], 3),
        "max ms": round(ordered[-1], 3),
    }


def prune_flat_day(conn, day: datetime, *, batch: int) -> dict:
    """apps/history's plan per tenant: ids of a batch by (tenant, created_at) range, then one
    short transaction deleting the attempts and the runs by key."""
    runs = attempts = transactions = 0
    slowest = 0.0
    tenants = [r[0] for r in conn.execute("SELECT DISTINCT md5('t' || i)::uuid FROM generate_series(0, 99) i")]
    for tenant in tenants:
        while True:
            ids = [
                r[0]
                for r in conn.execute(
                    "SELECT id FROM flat_run WHERE tenant_id = %s AND created_at >= %s AND created_at < %s "
                    "AND status IN ('succeeded', 'skipped', 'cancelled', 'failed') ORDER BY created_at, id LIMIT %s",
                    [tenant, day, day + timedelta(days=1), batch],
                )
            ]
            if not ids:
                break
            t = time.perf_counter()
            with conn.transaction():
                attempts += conn.execute("DELETE FROM flat_attempt WHERE run_id = ANY(%s)", [ids]).rowcount
                runs += conn.execute("DELETE FROM flat_run WHERE id = ANY(%s)", [ids]).rowcount
            slowest = max(slowest, time.perf_counter() - t)
            transactions += 1
    return {
        "runs": runs,
        "attempts": attempts,
        "transactions": transactions,
        "slowest transaction ms": round(slowest * 1000, 1),
    }


def drop_part_day(conn, day: datetime) -> dict:
    """DETACH ... CONCURRENTLY (no ACCESS EXCLUSIVE on the parent; cannot run in a transaction
    block) then DROP, the attempts' partition first (its FK references the runs' partition)."""
    suffix = f"{day:%Y%m%d}"
    runs = conn.execute(f"SELECT count(*) FROM part_run_{suffix}").fetchone()[0]
    attempts = conn.execute(f"SELECT count(*) FROM part_attempt_{suffix}").fetchone()[0]
    slowest = 0.0
    for table in ("part_attempt", "part_run"):
        for statement in (
            f"ALTER TABLE {table} DETACH PARTITION {table}_{suffix} CONCURRENTLY",
            f"DROP TABLE {table}_{suffix}",
        ):
            t = time.perf_counter()
            conn.execute(statement)
            slowest = max(slowest, time.perf_counter() - t)
    return {"runs": runs, "attempts": attempts, "transactions": 4, "slowest transaction ms": round(slowest * 1000, 1)}


def measure(conn, design: str, action, ids: list, *, days: int) -> dict:
    wal = WalCounter(conn)
    wal.start()
    with Probe(design, ids, now=BASE + timedelta(days=days - 1, seconds=0.3)) as probe:
        time.sleep(1.0)  # the probe's idle baseline before the prune starts
        idle = probe.summary()
        probe.clear()
        t = time.perf_counter()
        result = action()
        result["wall s"] = round(time.perf_counter() - t, 2)
        time.sleep(0.2)
    wal.poll()
    result["WAL MB (this database)"] = round(wal.totals["bytes"] / 1e6, 1)
    result["WAL lost ranges"] = wal.lost_ranges
    result["probe idle"] = idle
    result["probe during"] = probe.summary()
    return result


def hot_path_latency(conn, design: str, ids: list, *, days: int, seconds: float = 5.0) -> dict:
    with Probe(design, ids, now=BASE + timedelta(days=days - 1, seconds=0.6)) as probe:
        time.sleep(seconds)
    release = []
    for _ in range(50):
        t = time.perf_counter()
        conn.execute(
            f"SELECT id FROM {design}_run WHERE status IN ('scheduled', 'retrying') AND available_at <= %s "
            "ORDER BY available_at LIMIT 100",
            [BASE + timedelta(days=600)],
        ).fetchall()
        release.append((time.perf_counter() - t) * 1000)
    page = []
    for _ in range(50):
        t = time.perf_counter()
        conn.execute(
            f"SELECT id FROM {design}_run WHERE tenant_id = md5('t7')::uuid ORDER BY created_at DESC LIMIT 50"
        ).fetchall()
        page.append((time.perf_counter() - t) * 1000)
    return {**probe.summary(), "release scan": quantiles(release), "tenant runs page": quantiles(page)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3_000_000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--batch", type=int, default=5000)
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    args = parser.parse_args()
    with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{DB}"')
        admin.execute(f'CREATE DATABASE "{DB}"')
    report: dict = {"runs": args.runs, "days": args.days, "batch": args.batch}
    try:
        with psycopg.connect(DSN, autocommit=True) as conn:
            report["load"] = load(conn, runs=args.runs, days=args.days)
            report["size MB"] = {
                t: round(conn.execute("SELECT pg_total_relation_size(%s)", [t]).fetchone()[0] / 1e6, 1)
                for t in ("flat_run", "flat_attempt")
            }
            # Lookups probe ids of days that stay (not the day being pruned).
            ids = [
                r[0]
                for r in conn.execute(
                    "SELECT id FROM flat_run TABLESAMPLE SYSTEM (0.1) WHERE created_at > %s", [BASE + timedelta(days=2)]
                )
            ]
            report["hot path, nothing pruning"] = {
                d: hot_path_latency(conn, d, ids, days=args.days) for d in ("flat", "part")
            }
            report["plan of one batch read (flat)"] = [
                row[0]
                for row in conn.execute(
                    "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) SELECT id FROM flat_run WHERE tenant_id = md5('t3')::uuid "
                    "AND created_at >= %s AND created_at < %s AND status IN ('succeeded', 'skipped', 'cancelled') "
                    "ORDER BY created_at, id LIMIT %s",
                    [BASE, BASE + timedelta(days=1), args.batch],
                )
            ]
            report["flat: batched delete of day 1"] = measure(
                conn, "flat", lambda: prune_flat_day(conn, BASE, batch=args.batch), ids, days=args.days
            )
            report["part: detach + drop of day 1"] = measure(
                conn, "part", lambda: drop_part_day(conn, BASE), ids, days=args.days
            )
    finally:
        if not args.keep:
            with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)')
    print(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
