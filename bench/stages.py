"""Where a scheduler tick and a worker task spend their time, measured in-process.

Calls the app's own service functions (apps.scheduler.services.materialize_due_runs /
release_due_runs, apps.delivery.services.deliver_runs) in this process against chime_bench, with
a Django execute_wrapper that times every SQL statement by kind, a timer around the Celery
publish, and cProfile for the hottest Python functions. Deliveries go to the bench receiver
process. Reports the median per batch over several batches.

    .venv/bin/python -m bench.stages --n 10000
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import re
import sys
import time
from collections import defaultdict
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable as `python bench/x.py` too

from bench.common import (
    ROOT,
    BackendCpu,
    ReceiverProcess,
    Report,
    base_parser,
    bench_tenants,
    ensure_database,
    fmt,
    load_once_definitions,
    log,
    median,
    pg_connect,
    processes,
    reset_state,
    setup_django,
    table,
    utcnow,
)

TABLE_OF = {
    "SELECT": re.compile(r'\bFROM\s+"?(\w+)"?', re.I),
    "INSERT": re.compile(r'^INSERT\s+INTO\s+"?(\w+)"?', re.I),
    "UPDATE": re.compile(r'^UPDATE\s+"?(\w+)"?', re.I),
    "DELETE": re.compile(r'^DELETE\s+FROM\s+"?(\w+)"?', re.I),
}


def sql_kind(sql: str) -> str:
    """'UPDATE jobs_jobrun', 'SELECT jobs_jobdefinition FOR UPDATE', ... for one statement."""
    text = sql.lstrip()
    verb = text.split(None, 1)[0].upper() if text else "?"
    if verb in ("SELECT", "WITH"):
        tables = [t for t in re.findall(r'\bFROM\s+"?(\w+)"?', text, re.I) if t.lower() != "unnest"]
        kind = f"{verb} {tables[0]}" if tables else verb
    else:
        pattern = TABLE_OF.get(verb)
        match = pattern.search(text) if pattern else None
        kind = f"{verb} {match.group(1)}" if match else verb
    if verb == "SELECT" and "FOR UPDATE" in text.upper():
        kind += " FOR UPDATE"
    return kind


class SqlTimer:
    """Django execute_wrapper: wall time and count of statements, by kind."""

    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)
        self.count: dict[str, int] = defaultdict(int)

    def __call__(self, execute, sql, params, many, context):
        kind = sql_kind(sql)
        t0 = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self.seconds[kind] += time.perf_counter() - t0
            self.count[kind] += 1


@contextmanager
def timed_attr(module, name: str, bucket: dict, label: str):
    """Wrap module.name with a timer (bench process only; the app code is untouched)."""
    original = getattr(module, name, None)
    if original is None:  # renamed in the app: measure without this timer
        yield
        return

    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            bucket[label] = bucket.get(label, 0.0) + time.perf_counter() - t0

    setattr(module, name, wrapper)
    try:
        yield
    finally:
        setattr(module, name, original)


def top_functions(profile: cProfile.Profile, limit: int = 14) -> str:
    """The functions with the most cumulative time, Chime's and Django's entry points first."""
    out = io.StringIO()
    try:
        stats = pstats.Stats(profile, stream=out)
    except TypeError:  # nothing was profiled
        return "(no profile)"
    wanted = r"apps/|django/db/models/(query|sql/compiler)\.py|kombu|celery/app"
    stats.sort_stats("cumulative").print_stats(wanted, limit)
    lines = [line for line in out.getvalue().splitlines() if re.match(r"\s*\d", line)]
    root = str(ROOT) + "/"
    return "\n".join(
        line.replace(root, "").replace(str(ROOT / ".venv/lib/python3.11/site-packages") + "/", "")
        for line in lines[:limit]
    )


def measure_batches(step, batches: int, profiled: int = 2, before=None):
    """Run step() `batches` times; per batch: total seconds, SQL seconds by kind, other timers.

    The first `profiled` batches (which also warm up caches and connections) run under cProfile
    and are left out of the timings (the profiler slows Python down).
    """
    from django.db import connection

    rows = []
    profile = cProfile.Profile()
    with pg_connect() as meter_conn:
        backends = BackendCpu(meter_conn)
        for index in range(batches):
            timer = SqlTimer()
            extra: dict[str, float] = {}
            use_profiler = index < profiled
            if before is not None:
                before()  # untimed
            backends.start()
            cpu0 = time.process_time()
            t0 = time.perf_counter()
            with connection.execute_wrapper(timer):
                if use_profiler:
                    profile.enable()
                processed = step(extra)
                if use_profiler:
                    profile.disable()
            total = time.perf_counter() - t0
            cpu = time.process_time() - cpu0
            backends.sample()
            if not processed:
                break
            if not use_profiler:
                rows.append((processed, total, dict(timer.seconds), dict(timer.count), extra, (cpu, backends.used())))
    return rows, profile


def summarize(rows, rep: Report, what: str, per_unit: str = "") -> None:
    if not rows:
        rep.add(f"\n**{what}**: nothing was processed (no timed batch).\n")
        return
    kinds = sorted({k for r in rows for k in r[2]}, key=lambda k: -median([r[2].get(k, 0.0) for r in rows]))
    extras = sorted({k for r in rows for k in r[4]})
    total = median([r[1] for r in rows])
    per = median([r[0] for r in rows])
    lines = [["whole batch", fmt(total * 1000, " ms", 1), "100%", ""]]
    accounted = 0.0
    for label in extras:
        value = median([r[4].get(label, 0.0) for r in rows])
        if "SQL included" not in label:  # its statements are counted in the SQL rows below
            accounted += value
        lines.append([label, fmt(value * 1000, " ms", 1), f"{100 * value / total:.0f}%", ""])
    for kind in kinds:
        value = median([r[2].get(kind, 0.0) for r in rows])
        count = median([r[3].get(kind, 0) for r in rows])
        accounted += value
        lines.append([f"SQL: {kind}", fmt(value * 1000, " ms", 1), f"{100 * value / total:.0f}%", fmt(count, "", 0)])
    rest = total - accounted
    lines.append(["Python (the rest)", fmt(rest * 1000, " ms", 1), f"{100 * rest / total:.0f}%", ""])
    if per_unit:
        rep.add(f"\n**{what}** — median of {len(rows)} {per_unit}:\n")
    else:
        rep.add(
            f"\n**{what}** — median of {len(rows)} batches of {per:,.0f}; "
            f"{fmt(per / total, '/s', 0)} for one process:\n"
        )
    rep.add(table(["part", "time per batch", "share", "statements"], lines))
    units = sum(r[0] for r in rows)
    own = sum(r[5][0] for r in rows)
    database = sum(r[5][1] for r in rows)
    rep.add(
        f"\nCPU over these {len(rows)} batches ({units:,} {'units' if per_unit else 'rows'}): this process "
        f"{fmt(own * 1000, ' ms', 0)}, PostgreSQL backends of the bench database {fmt(database * 1000, ' ms', 0)}; "
        f"per 1,000: process {fmt(own * 1e6 / units, ' ms', 1)}, PostgreSQL {fmt(database * 1e6 / units, ' ms', 1)} "
        "(/proc, 10 ms ticks: totals, not medians).\n"
    )


def main() -> None:
    parser = base_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, help="due definitions to process (default 10,000; --quick 5,000)")
    parser.add_argument("--tenants", type=int, default=100, help="tenants the definitions belong to (default 100)")
    args = parser.parse_args()
    n = args.n or (5_000 if args.quick else 10_000)
    if not args.no_setup:
        ensure_database()
    # Nothing drains the queues here, so lift the release backpressure (CHIME_MAX_QUEUED_RUNS per
    # priority tier) for this process: the point is the cost of a release batch.
    os.environ["CHIME_MAX_QUEUED_RUNS"] = str(10 * n)
    tenants = bench_tenants(args.tenants)
    setup_django()
    from django.conf import settings
    from django.db import connection
    from django.utils import timezone

    import apps.scheduler.services as scheduler_services
    from apps.delivery import outcomes
    from apps.delivery import services as delivery_services
    from apps.jobs.models import JobRun
    from apps.scheduler import fairness
    from apps.scheduler.leases import LeaseKeeper, ensure_lease_rows

    batch = settings.CHIME_SCHEDULER_BATCH_SIZE
    chunk = settings.CHIME_ENQUEUE_CHUNK
    rep = Report("Stage breakdown: one scheduler batch, one worker task (in-process)", args.md)
    reset_state()
    partitions = list(range(settings.CHIME_PARTITIONS))
    ensure_lease_rows()
    leases = LeaseKeeper(candidates=partitions, pinned=True)
    leases.refresh()

    log("stages: idle ticks (nothing due, nothing to release)")

    def idle_tick(extra):
        scheduler_services.scheduler_tick(leases=leases)
        return 1

    i_rows, i_prof = measure_batches(idle_tick, 52)

    with processes():
        receiver = ReceiverProcess("stages-receiver")
        fire_at = utcnow() - timedelta(seconds=1)
        load_once_definitions(
            tenant=tenants[0], tenants=tenants, fire_times=iter(lambda: fire_at, None), count=n, target_url=receiver.url
        )
        with pg_connect() as conn:
            conn.execute("ANALYZE jobs_jobdefinition")

        log(f"stages: materialize {n:,} due definitions in batches of {batch}")

        def materialize(extra):
            # insert_run_rows uses its own psycopg cursor (not seen by the SQL timer): time the call.
            insert_label = "insert_run_rows (INSERT ... unnest, own cursor)"
            with timed_attr(scheduler_services, "insert_run_rows", extra, insert_label):
                processed, _lag = scheduler_services.materialize_due_runs(
                    partitions=partitions, now=timezone.now(), batch_size=batch
                )
            return processed

        m_rows, m_prof = measure_batches(materialize, n // batch)

        log("stages: release")
        with pg_connect() as conn:
            conn.execute("ANALYZE jobs_jobrun")
        publish_label = f"Celery publish ({batch // chunk} x apply_async)"

        def release(extra):
            with (
                timed_attr(scheduler_services, "publish_runs", extra, publish_label),
                timed_attr(scheduler_services, "fair_selection", extra, "fair_selection() (its SQL included)"),
                timed_attr(fairness, "queue_budgets", extra, "fair_selection: queue_budgets() (SQL included)"),
                timed_attr(fairness, "_candidates_postgresql", extra, "fair_selection: candidates (SQL included)"),
            ):
                return scheduler_services.release_due_runs(leases=leases, now=timezone.now(), batch_size=batch)

        # Keep the partition leases fresh (they expire after CHIME_LEASE_TTL_SECONDS), untimed.
        r_rows, r_prof = measure_batches(release, n // batch + 1, before=leases.refresh)
        leases.release_all()

        log("stages: deliver (worker side) in chunks of 50")
        # The bench process is not a worker: take the published messages off Redis, then deliver
        # their run ids here exactly as the task would.
        from bench.common import redis_client

        redis_client().flushdb()
        run_ids = [str(i) for i in JobRun.objects.order_by("id").values_list("id", flat=True)]
        chunks = [run_ids[i : i + chunk] for i in range(0, len(run_ids), chunk)]
        position = iter(chunks)

        from apps.delivery import window
        from apps.delivery.transport import Transport

        def deliver(extra):
            # The delivery window's path (apps/delivery/window.py): admit -> _peek -> claim_runs ->
            # build_request -> Transport.submit_many -> record_in_lock_order -> record_outcomes.
            # bench/delivery_stages.py breaks it down further (SQL per stage, CPU per run).
            ids = next(position, None)
            if not ids:
                return 0
            with (
                timed_attr(window.Window, "_peek", extra, "Window._peek: read the runs (SQL included)"),
                timed_attr(window, "claim_runs", extra, "claim_runs (SQL included)"),
                timed_attr(window, "build_request", extra, "build + sign requests"),
                timed_attr(Transport, "submit_many", extra, "Transport.submit_many (hand to the loop)"),
                timed_attr(window, "record_in_lock_order", extra, "record_in_lock_order (SQL included)"),
                # COPY on its own cursor: not seen by the SQL timer, so time the call.
                timed_attr(outcomes, "insert_attempts", extra, "insert_attempts (COPY, own cursor)"),
            ):
                report = delivery_services.deliver_runs(ids)
            return report.claimed

        deliver({})  # warm up the transport's loop thread and connection pool
        d_rows, d_prof = measure_batches(deliver, min(len(chunks) - 1, 60))
        connection.close()
        receiver.stop()
    reset_state()

    rep.add(
        "Each row is the median over batches. SQL time is measured around each statement in the calling "
        "process (so it includes the round trip and the server's work); 'Python (the rest)' is everything "
        "else in the calling process.\n"
    )
    summarize(m_rows, rep, f"materialize_due_runs (batch {batch})")
    summarize(
        r_rows,
        rep,
        f"release_due_runs (batch {batch}, {chunk} run ids per message, {args.tenants} tenants; backpressure lifted)",
    )
    summarize(i_rows, rep, "scheduler_tick with nothing due (holding all 64 partitions)", per_unit="ticks")
    summarize(d_rows, rep, f"deliver_runs through the delivery window (one message, {chunk} runs)")
    for title, prof in (("materialize", m_prof), ("release", r_prof), ("idle tick", i_prof), ("deliver", d_prof)):
        rep.add(f"\nProfile of {title} (cProfile, by cumulative time: ncalls tottime percall cumtime percall):\n")
        rep.add("```\n" + top_functions(prof) + "\n```")
    rep.save()


if __name__ == "__main__":
    main()
