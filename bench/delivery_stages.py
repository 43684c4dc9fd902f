"""Where a worker's delivery of one message goes, stage by stage, on the delivery window's path.

The hot path since the delivery window (apps/delivery/window.py) is: `Window.admit` ->
`Window._peek` (read the runs) -> `claim_runs` (claiming.py) -> `cancel_unsendable` (+ signing
secrets) -> `build_request` (preparing.py) -> `Transport.submit_many` -> the requests on the loop
thread -> `record_in_lock_order` (recording.py) -> `record_outcomes` (outcomes.py). This calls
`services.deliver_runs` (the same window, recording in the caller's thread) in-process on N runs
already `queued` (100 tenants, endpoints on 8 receiver hosts), one message of
CHIME_ENQUEUE_CHUNK runs at a time, and reports per stage: wall time per message and per run, the
SQL statements each stage sent (by kind, counted through a Django execute_wrapper attributed to
the stage running), and the CPU of this process and of its PostgreSQL backend per run (from /proc).

    .venv/bin/python -m bench.delivery_stages --n 5000 [--chunk 50]
    .venv/bin/python -m bench.delivery_stages --worker --n 20000   # a real Celery worker instead

`--worker`: the same N queued runs published (CHIME_ENQUEUE_CHUNK per message) to a real Celery
worker (prefork, --concurrency 2, no scheduler), and the CPU per delivered run of the worker's
processes and of the worker's PostgreSQL backends (application_name chime-worker, sampled from
/proc), until all succeeded: the worker's side of the spike without the scheduler's.
"""

from __future__ import annotations

import os
import sys
import time
from collections import defaultdict
from contextlib import ExitStack, contextmanager
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable as `python bench/x.py` too

from bench.common import (
    ReceiverProcess,
    Report,
    base_parser,
    bench_tenants,
    cpu_seconds,
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
from bench.stages import sql_kind, top_functions

_stage: list[str] = ["(outside a stage)"]


class StageSql:
    """execute_wrapper: statements and their wall time, by (stage running, statement kind)."""

    def __init__(self):
        self.seconds: dict[tuple[str, str], float] = defaultdict(float)
        self.count: dict[tuple[str, str], int] = defaultdict(int)

    def __call__(self, execute, sql, params, many, context):
        key = (_stage[-1], sql_kind(sql))
        t0 = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self.seconds[key] += time.perf_counter() - t0
            self.count[key] += 1


@contextmanager
def staged(owner, name: str, label: str, bucket: dict):
    """Wrap owner.name: its wall time goes to bucket[label], and the SQL it sends to that stage."""
    original = getattr(owner, name, None)
    if original is None:  # renamed in the app: measure without this stage
        yield
        return

    def wrapper(*args, **kwargs):
        _stage.append(label)
        t0 = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            bucket[label] = bucket.get(label, 0.0) + time.perf_counter() - t0
            _stage.pop()

    setattr(owner, name, wrapper)
    try:
        yield
    finally:
        setattr(owner, name, original)


def queued_runs(tenants: list, url: str, n: int, hosts: int = 1) -> list[str]:
    """n definitions far in the future (spread over the tenants), each with one run `queued`;
    with hosts > 1 their URLs spread over 127.0.0.1 .. 127.0.0.<hosts> (the receiver's --hosts),
    so the window's cap per host (50) does not park most of them."""
    far = (utcnow() + timedelta(days=365)).replace(microsecond=0)
    load_once_definitions(
        tenant=tenants[0], tenants=tenants, fire_times=(far for _ in range(n)), count=n, target_url=url
    )
    with pg_connect() as conn:
        if hosts > 1:
            conn.execute(
                "UPDATE jobs_jobdefinition SET target_url = "
                "replace(target_url, '127.0.0.1', '127.0.0.' || (1 + abs(hashtext(id::text)) %% %s))",
                [hosts],
            )
        rows = conn.execute(
            """INSERT INTO jobs_jobrun (id, tenant_id, definition_id, partition, priority, scheduled_for, trigger,
                   status, status_reason, available_at, attempt_count, attempts_before_replay, lease_owner,
                   created_at, queued_at)
               SELECT gen_random_uuid(), tenant_id, id, partition, priority, now(), 'schedule', 'queued', '',
                      now(), 0, 0, '', now(), now()
                 FROM jobs_jobdefinition ORDER BY id RETURNING id"""
        ).fetchall()
        conn.execute("ANALYZE jobs_jobrun")
        conn.execute("ANALYZE jobs_jobdefinition")
    return [str(row[0]) for row in rows]


def worker_end_to_end(args, tenants, rep) -> None:
    from bench.common import CpuMeter, SampledCpu, backends_of, pids_of_database, start_worker, wait_for

    reset_state()
    n = args.n or 20_000
    with processes():
        receiver = ReceiverProcess("delivery-e2e-receiver", hosts=args.hosts)
        ids = queued_runs(tenants, receiver.url, n, hosts=args.hosts)
        worker = start_worker("delivery-e2e-worker", concurrency=2)
        time.sleep(3)  # the children are up
        from django.conf import settings

        from apps.delivery.enqueue import publish_runs

        meter = CpuMeter(
            {
                "worker (all processes)": worker.group_pids,
                "postgres: the worker's backends": SampledCpu(backends_of("chime-worker")),
                "postgres: all of the bench db": SampledCpu(pids_of_database),
                "receiver": lambda: [receiver.pid],
            }
        )
        load = os.getloadavg()[0]
        meter.start()
        chunk = settings.CHIME_ENQUEUE_CHUNK
        for i in range(0, n, 2000):  # as release does: a batch, then the next
            publish_runs(ids[i : i + 2000], priority="default")

        def done():
            with pg_connect() as conn:
                return conn.execute("SELECT count(*) FROM jobs_jobrun WHERE status = 'succeeded'").fetchone()[0] >= n

        wait_for(done, 600, "all delivered", interval=0.2)
        used = meter.stop()
        worker.stop()
        receiver.stop()
    with pg_connect() as conn:
        # A claim gives its runs one started_at, a recording transaction one finished_at.
        claims, records = conn.execute(
            "SELECT count(DISTINCT started_at), count(DISTINCT finished_at) FROM jobs_jobrun"
        ).fetchone()
    reset_state()
    rep.add(
        f"{n:,} queued runs ({args.tenants} tenants) published in messages of {chunk} to one "
        f"Celery worker (prefork, 2 processes), no scheduler; {meter.wall:.1f} s to all succeeded "
        f"({n / meter.wall:,.0f} runs/s), endpoints on {args.hosts} hosts; load average {load:.2f} at the start; "
        f"{n / claims:.1f} runs per claim, {n / records:.1f} per recording transaction.\n"
    )
    rep.add(
        table(
            ["process", "CPU s", "CPU per run"],
            [[name, fmt(v, " s", 1), fmt(1000 * v / n, " ms", 3)] for name, v in used.items()],
        )
    )


def backend_cpu() -> float:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    return cpu_seconds([pid])


def main() -> None:
    parser = base_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, help="queued runs to deliver (default 5,000; --quick 2,000)")
    parser.add_argument("--chunk", type=int, help="runs per message (default CHIME_ENQUEUE_CHUNK)")
    parser.add_argument("--tenants", type=int, default=100, help="tenants the runs belong to (default 100)")
    parser.add_argument("--profile", action="store_true", help="cProfile the first two messages and print it")
    parser.add_argument("--hosts", type=int, default=8, help="receiver hosts 127.0.0.1..N the runs spread over")
    parser.add_argument("--worker", action="store_true", help="a real Celery worker, CPU per run (see above)")
    args = parser.parse_args()
    n = args.n or (2_000 if args.quick else 5_000)
    if not args.no_setup:
        ensure_database()
    tenants = bench_tenants(args.tenants)
    setup_django()
    if args.worker:
        rep = Report("Delivery: one Celery worker's CPU per run (no scheduler)", args.md)
        worker_end_to_end(args, tenants, rep)
        rep.save()
        return
    import cProfile

    from django.conf import settings
    from django.db import connection

    from apps.delivery import outcomes, recording, services, window
    from apps.delivery.transport import Transport

    chunk = args.chunk or settings.CHIME_ENQUEUE_CHUNK
    reset_state()
    rep = Report(f"Delivery stages: one message of {chunk} runs on the window's path (in-process)", args.md)
    with processes():
        receiver = ReceiverProcess("delivery-stages-receiver", hosts=args.hosts)
        ids = queued_runs(tenants, receiver.url, n + 2 * chunk, hosts=args.hosts)
        chunks = [ids[i : i + chunk] for i in range(0, len(ids), chunk)]
        log(f"delivery stages: {len(ids):,} queued runs, messages of {chunk}")
        services.deliver_runs(chunks.pop(0))  # warm up: the transport's loop, the pool, the caches
        profile = cProfile.Profile()
        if args.profile:
            profile.enable()
        services.deliver_runs(chunks.pop(0))
        profile.disable()
        sql = StageSql()
        per_message: list[tuple[float, dict]] = []
        delivered = 0
        labels = {
            "peek": "Window._peek: read the runs",
            "claim": "claim_runs: lock + flip queued->running",
            "check": "cancel_unsendable + signing secrets",
            "build": "build_request: body, headers, signature",
            "submit": "Transport.submit_many: hand to the loop",
            "record": "record_in_lock_order (whole)",
            "outcomes": "  of which record_outcomes",
            "copy": "  of which insert_attempts (COPY, own cursor)",
        }
        cpu0, thread0, pg0, t_all = time.process_time(), time.thread_time(), backend_cpu(), time.perf_counter()
        with ExitStack() as stack:
            stack.enter_context(connection.execute_wrapper(sql))
            bucket: dict[str, float] = {}
            stack.enter_context(staged(window.Window, "_peek", labels["peek"], bucket))
            stack.enter_context(staged(window, "claim_runs", labels["claim"], bucket))
            stack.enter_context(staged(window, "cancel_unsendable", labels["check"], bucket))
            stack.enter_context(staged(window, "build_request", labels["build"], bucket))
            stack.enter_context(staged(Transport, "submit_many", labels["submit"], bucket))
            stack.enter_context(staged(window, "record_in_lock_order", labels["record"], bucket))
            stack.enter_context(staged(recording, "record_outcomes", labels["outcomes"], bucket))
            stack.enter_context(staged(outcomes, "insert_attempts", labels["copy"], bucket))
            for ids in chunks:
                bucket.clear()
                t0 = time.perf_counter()
                report = services.deliver_runs(ids)
                per_message.append((time.perf_counter() - t0, dict(bucket)))
                delivered += report.outcomes.get("succeeded", 0)
        wall = time.perf_counter() - t_all
        cpu, caller, pg = time.process_time() - cpu0, time.thread_time() - thread0, backend_cpu() - pg0
        connection.close()
        receiver.stop()
    reset_state()
    messages = len(per_message)
    total = median([w for w, _ in per_message])
    rows = []
    for label in labels.values():
        value = median([b.get(label, 0.0) for _, b in per_message])
        stage_sql = {k: c for (s, k), c in sql.count.items() if s == label}
        statements = ", ".join(f"{kind} x{c / messages:g}" for kind, c in sorted(stage_sql.items()))
        sql_ms = sum(v for (s, _), v in sql.seconds.items() if s == label) / messages * 1000
        rows.append(
            [label, fmt(value * 1000, " ms", 2), fmt(value * 1e6 / chunk, " µs", 0), fmt(sql_ms, " ms", 2), statements]
        )
    outside = {k: c for (s, k), c in sql.count.items() if s == _stage[0]}
    if outside:
        rows.append(
            ["(other SQL)", "", "", "", ", ".join(f"{k} x{c / messages:g}" for k, c in sorted(outside.items()))]
        )
    rows.append(
        [
            "whole message (wall, includes waiting for the responses)",
            fmt(total * 1000, " ms", 2),
            fmt(total * 1e6 / chunk, " µs", 0),
            "",
            "",
        ]
    )
    statements_per_run = sum(sql.count.values()) / max(delivered, 1)
    rep.add(
        f"{messages} messages of {chunk} runs ({delivered:,} delivered, {args.tenants} tenants, "
        f"{args.hosts} receiver hosts), "
        f"median per message; SQL time is measured around each statement in this process (round trip included). "
        f"Machine load at the start: {os.getloadavg()[0]:.2f}.\n"
    )
    rep.add(table(["stage", "per message", "per run", "its SQL", "statements per message"], rows))
    rep.add(
        f"\nPer delivered run over the whole loop ({wall:.1f} s wall): **worker CPU {1000 * cpu / delivered:.3f} ms** "
        f"(this process, every thread; of which the caller's thread {1000 * caller / delivered:.3f} ms, the rest "
        f"mostly the transport's loop), "
        f"**PostgreSQL CPU {1000 * pg / delivered:.3f} ms** "
        f"(this connection's backend), {statements_per_run:.2f} SQL statements (+ the COPY); "
        f"{delivered / wall:,.0f} runs/s in one process.\n"
    )
    if args.profile:
        rep.add("\nProfile of one message (cProfile, by cumulative time: ncalls tottime percall cumtime percall):\n")
        rep.add("```\n" + top_functions(profile, 30) + "\n```")
    rep.save()


if __name__ == "__main__":
    main()
