"""Due-scan cost with a big table: 1M and 5M definitions (--quick: 1M), few or none due.

Bulk-loads active `once` definitions whose next_fire_at lie 1-25 h ahead (COPY; secondary indexes
dropped during the load and rebuilt from their own definitions afterwards, FK triggers off for the
loading session), then times the scheduler's own materialize query — captured from
apps.scheduler.services.materialize_due_runs, not rewritten — when nothing is due and when 100
are due (median of 20; the 100-due calls are rolled back so they stay due), for all partitions
and for one shard of 4. Prints EXPLAIN (ANALYZE, BUFFERS) to show an index range scan on
jobdef_due_idx. Then starts a real `run_scheduler` against the big table: its idle CPU and
RSS, and RSS after a spike of --spike definitions made due at once. Drops the rows at the end.

    .venv/bin/python -m bench.scan --sizes 1000000,5000000
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable as `python bench/x.py` too

from bench.common import (
    LOGS,
    BackendCpu,
    Report,
    base_parser,
    bench_tenant,
    copy_definitions,
    copy_text_time,
    cpu_seconds,
    ensure_database,
    fmt,
    log,
    pg_connect,
    proc_status_kb,
    processes,
    redis_client,
    reset_state,
    setup_django,
    start_scheduler,
    table,
    verify_partitions,
    wait_for,
)

SECONDARY_INDEXES_FILE = LOGS / "scan-dropped-indexes.json"
TABLE = "jobs_jobdefinition"


def restore_indexes() -> None:
    """Rebuild the secondary indexes dropped for a load (also after a crashed earlier run)."""
    if not SECONDARY_INDEXES_FILE.exists():
        return
    definitions = json.loads(SECONDARY_INDEXES_FILE.read_text())
    with pg_connect() as conn:
        conn.execute("SET maintenance_work_mem = '512MB'")
        for definition in definitions:
            conn.execute(definition.replace("CREATE INDEX ", "CREATE INDEX IF NOT EXISTS ", 1))
    SECONDARY_INDEXES_FILE.unlink()


def drop_secondary_indexes() -> None:
    with pg_connect() as conn:
        rows = conn.execute(
            "SELECT i.indexname, i.indexdef FROM pg_indexes i WHERE i.tablename = %s AND i.indexname NOT IN "
            "(SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass)",
            [TABLE, TABLE],
        ).fetchall()
        LOGS.mkdir(parents=True, exist_ok=True)
        SECONDARY_INDEXES_FILE.write_text(json.dumps([d for _, d in rows]))
        for name, _ in rows:
            conn.execute(f'DROP INDEX "{name}"')


def load_big(*, tenant, count: int, target_url: str) -> dict[str, float]:
    """COPY `count` once-definitions, next_fire_at spread over 1-25 h from now (whole seconds)."""
    base = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
    span = 24 * 3600
    texts = [copy_text_time(base + timedelta(seconds=s)) for s in range(span)]
    # A permutation of the span, so fire times are not in id order.
    fire_texts = (texts[(k * 7919) % span] for k in range(count))
    times = {}
    t0 = time.perf_counter()
    drop_secondary_indexes()
    try:
        times["COPY"] = copy_definitions(
            tenant=tenant,
            target_url=target_url,
            fire_texts=fire_texts,
            count=count,
            name_prefix="scan",
            skip_fk_checks=True,
        )
    finally:
        t1 = time.perf_counter()
        restore_indexes()
        times["rebuild indexes"] = time.perf_counter() - t1
    t2 = time.perf_counter()
    with pg_connect() as conn:
        conn.execute(f"VACUUM (ANALYZE) {TABLE}")
    times["VACUUM ANALYZE"] = time.perf_counter() - t2
    times["total"] = time.perf_counter() - t0
    verify_partitions()
    return times


class Rollback(Exception):
    pass


def capture_and_time(partitions, *, repeats: int) -> dict:
    """Run the real materialize_due_runs `repeats` times (rolled back); time its due-scan SELECT."""
    from django.db import connection, transaction
    from django.utils import timezone

    from apps.scheduler.services import materialize_due_runs

    captured: dict = {}
    select_ms, call_ms, processed = [], [], []

    def wrapper(execute, sql, params, many, context):
        t0 = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            if sql.lstrip().startswith("SELECT") and "UPDATE SKIP LOCKED" in sql and "jobs_jobdefinition" in sql:
                select_ms.append((time.perf_counter() - t0) * 1000)
                captured.setdefault("sql", sql)
                captured.setdefault("params", params)

    for _ in range(repeats + 1):  # the first call warms caches and is dropped
        t0 = time.perf_counter()
        try:
            with transaction.atomic(), connection.execute_wrapper(wrapper):
                count, _lag = materialize_due_runs(partitions=partitions, now=timezone.now(), batch_size=1000)
                processed.append(count)
                call_ms.append((time.perf_counter() - t0) * 1000)
                raise Rollback
        except Rollback:
            pass
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + captured["sql"], captured["params"])
        plan = "\n".join(row[0] for row in cursor.fetchall())
    return {
        "select_ms": statistics.median(select_ms[1:]),
        "call_ms": statistics.median(call_ms[1:]),
        "processed": processed[-1],
        "plan": plan,
        "sql": captured["sql"],
        "index_scan": "jobdef_due_idx" in plan and "Seq Scan" not in plan,
    }


def make_due(count: int, when: datetime) -> int:
    """Make about `count` random active definitions due at `when`; returns how many were."""
    with pg_connect() as conn:
        return conn.execute(
            f"UPDATE {TABLE} SET next_fire_at = %s, run_at = %s WHERE id IN "  # noqa: S608 (constant name)
            f"(SELECT id FROM {TABLE} TABLESAMPLE SYSTEM (1) WHERE status = 'active' LIMIT %s)",
            [when, when, count],
        ).rowcount


IDLE_SECONDS = 20


def scheduler_under_load(spike: int) -> dict:
    """A real scheduler against the big table: idle CPU and RSS, then RSS after a spike."""
    out: dict = {}
    with processes():
        scheduler = start_scheduler("scan-scheduler", "--shard", "0", "--shards", "1")
        time.sleep(3)
        with pg_connect() as meter_conn:
            # Only the bench database's backends: the server may be serving other databases.
            backends = BackendCpu(meter_conn)
            backends.start()
            cpu0, t0 = cpu_seconds([scheduler.pid]), time.monotonic()
            for _ in range(IDLE_SECONDS):
                time.sleep(1)
                backends.sample()
            wall = time.monotonic() - t0
            out["idle_cpu"] = (cpu_seconds([scheduler.pid]) - cpu0) / wall
            out["idle_pg_cpu"] = backends.used() / wall
        out["rss_idle_kb"] = proc_status_kb(scheduler.pid)
        # Due a second ago, so the scheduler takes them at its next tick; timed from the commit.
        actual = make_due(spike, datetime.now(UTC) - timedelta(seconds=1))
        t_due = time.time()
        out["spike"] = actual
        with pg_connect() as conn:
            # Materialized, not released: with no worker running, CHIME_TENANT_MAX_IN_FLIGHT stops
            # the release of one tenant's runs after the first batch.
            wait_for(
                lambda: conn.execute("SELECT count(*) FROM jobs_jobrun").fetchone()[0] >= actual,
                120,
                "spike materialized",
                interval=0.1,
            )
            out["spike_seconds"] = time.time() - t_due
        out["rss_after_kb"] = proc_status_kb(scheduler.pid)
        out["hwm_kb"] = proc_status_kb(scheduler.pid, "VmHWM")
        scheduler.stop()
    return out


def main() -> None:
    parser = base_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", help="comma list of table sizes (default 1000000,5000000; --quick 1000000)")
    parser.add_argument("--repeats", type=int, default=20, help="timed calls per case (default 20)")
    parser.add_argument("--spike", type=int, default=10_000, help="definitions made due at once for the RSS check")
    parser.add_argument("--keep", action="store_true", help="keep the loaded rows (default: drop them)")
    args = parser.parse_args()
    sizes = [int(s) for s in (args.sizes or ("1000000" if args.quick else "1000000,5000000")).split(",")]
    if not args.no_setup:
        ensure_database()
    restore_indexes()
    tenant = bench_tenant()
    setup_django()
    from django.db import connection

    from apps.scheduler.services import partitions_for_shard

    rep = Report("Due scan with many definitions", args.md)
    loads, timings, plans, schedulers = [], [], [], []
    try:
        for size in sizes:
            reset_state()
            log(f"scan: loading {size:,} definitions")
            load = load_big(tenant=tenant, count=size, target_url="http://127.0.0.1:9/hook")
            with pg_connect() as conn:
                table_mb = conn.execute(f"SELECT pg_total_relation_size('{TABLE}') / 1048576").fetchone()[0]
            loads.append((size, load, table_mb))
            log(f"scan: loaded in {load['total']:.1f} s; timing the due scan")
            cases = {}
            for due in (0, 100):
                if due:
                    make_due(due, datetime.now(UTC) - timedelta(seconds=1))
                for label, partitions in (
                    ("all 64", partitions_for_shard(0, 1)),
                    ("16 (shard 0 of 4)", partitions_for_shard(0, 4)),
                ):
                    result = capture_and_time(partitions, repeats=args.repeats)
                    cases[(due, label)] = result
                    timings.append((size, due, label, result))
                    connection.close()
            plans.append((size, cases[(0, "all 64")], cases[(100, "all 64")]))
            with pg_connect() as conn:  # the 100 made due go back to the future before the process test
                conn.execute(
                    f"UPDATE {TABLE} SET next_fire_at = next_fire_at + interval '2 hours', "  # noqa: S608
                    "run_at = run_at + interval '2 hours' WHERE next_fire_at < now()"
                )
            log("scan: real scheduler process against the big table")
            schedulers.append((size, scheduler_under_load(args.spike)))
    finally:
        log("scan: dropping the loaded rows")
        reset_state()
        redis_client().flushdb()
        restore_indexes()

    rep.add("Table build (COPY with secondary indexes dropped, then rebuilt; VACUUM ANALYZE):\n")
    rep.add(
        table(
            ["definitions", "COPY", "rebuild indexes", "VACUUM ANALYZE", "total", "rows/s (total)", "table + indexes"],
            [
                [
                    f"{size:,}",
                    fmt(t["COPY"], " s", 1),
                    fmt(t["rebuild indexes"], " s", 1),
                    fmt(t["VACUUM ANALYZE"], " s", 1),
                    fmt(t["total"], " s", 1),
                    fmt(size / t["total"], "/s", 0),
                    f"{mb:,} MiB",
                ]
                for size, t, mb in loads
            ],
        )
    )
    rep.add(
        f"\nThe scheduler's materialize query (the locking due-scan of materialize_due_runs, batch "
        f"1000), median of {args.repeats} calls. 'whole call' is materialize_due_runs including inserting the runs "
        "and advancing the definitions (rolled back after each call).\n"
    )
    rep.add(
        table(
            ["definitions", "due", "partitions", "due-scan query", "whole call", "index range scan"],
            [
                [
                    f"{size:,}",
                    due,
                    label,
                    fmt(r["select_ms"], " ms", 2),
                    fmt(r["call_ms"], " ms", 2),
                    "yes" if r["index_scan"] else "**no**",
                ]
                for size, due, label, r in timings
            ],
        )
    )
    for size, idle, busy in plans:
        rep.add(f"\n`EXPLAIN (ANALYZE, BUFFERS)`, {size:,} definitions, nothing due:\n")
        rep.add("```\n" + idle["plan"] + "\n```")
        rep.add(f"\n... and with 100 due:\n\n```\n{busy['plan']}\n```")
    rep.add(
        f"\nA real `run_scheduler --shard 0 --shards 1` against the big table (idle: {IDLE_SECONDS} s with "
        "nothing due, PostgreSQL = the bench database's backends; "
        f"then {args.spike:,} definitions made due at once; no worker running):\n"
    )
    rep.add(
        table(
            [
                "definitions",
                "idle CPU (scheduler)",
                "idle CPU (postgres)",
                "RSS idle",
                "spike",
                "all materialized (from the commit)",
                "RSS after",
                "peak (VmHWM)",
            ],
            [
                [
                    f"{size:,}",
                    f"{100 * s['idle_cpu']:.1f}%",
                    f"{100 * s['idle_pg_cpu']:.1f}%",
                    fmt(s["rss_idle_kb"] / 1024, " MiB", 0),
                    f"{s['spike']:,}",
                    fmt(s["spike_seconds"], " s", 2),
                    fmt(s["rss_after_kb"] / 1024, " MiB", 0),
                    fmt(s["hwm_kb"] / 1024, " MiB", 0),
                ]
                for size, s in schedulers
            ],
        )
    )
    rep.save()


if __name__ == "__main__":
    main()
