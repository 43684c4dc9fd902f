"""Steady load: --rate fires per second for --seconds (default 100/s for 60 s), fire lag p50/p99.

Loads rate x seconds active `once` definitions whose run_at (= next_fire_at) are spread uniformly,
1/rate seconds apart, starting ~15 s after the load; `once` jobs are used rather than
`* * * * *` crons because cron has minute resolution, so crons would arrive as one spike per
minute instead of a steady stream. Runs 1 scheduler, 1 Celery worker (prefork, concurrency 2) and
the receiver. Fire lag = arrival at the receiver - Chime-Scheduled-For. Goal: p50 < 250 ms,
p99 < 1 s.

    .venv/bin/python -m bench.steady --rate 100 --seconds 60
"""

from __future__ import annotations

import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable as `python bench/x.py` too

from bench.common import (
    CpuMeter,
    ReceiverProcess,
    Report,
    base_parser,
    bench_tenants,
    ensure_database,
    fmt,
    load_once_definitions,
    log,
    percentiles,
    pg_connect,
    pids_named,
    processes,
    reset_state,
    start_scheduler,
    start_worker,
    table,
    utcnow,
)
from bench.spike import stage_lags


def run_once(*, rate: float, seconds: float, tenants: list, drain: float = 30.0) -> dict:
    ensure_database()  # cheap when up to date; the app's migrations may have moved since the last run
    reset_state()
    n = int(rate * seconds)
    with processes():
        receiver = ReceiverProcess("steady-receiver")
        worker = start_worker("steady-worker", concurrency=2)
        scheduler = start_scheduler("steady-scheduler", "--shard", "0", "--shards", "1")
        start = (utcnow() + timedelta(seconds=15)).replace(microsecond=0)
        step = timedelta(seconds=1 / rate)
        log(f"steady: {n:,} once jobs of {len(tenants)} tenants, {rate:g}/s from {start:%H:%M:%S} for {seconds:g} s")
        load_once_definitions(
            tenant=tenants[0],
            tenants=tenants,
            fire_times=(start + k * step for k in range(n)),
            count=n,
            target_url=receiver.url,
        )
        with pg_connect() as conn:
            conn.execute("ANALYZE jobs_jobdefinition")
        meter = CpuMeter(
            {
                "scheduler": lambda: [scheduler.pid],
                "celery worker (all processes)": worker.group_pids,
                "receiver": lambda: [receiver.pid],
                "postgres (all backends)": lambda: pids_named("postgres"),
            }
        )
        t0 = start.timestamp()
        time.sleep(max(0.0, t0 - time.time()))
        meter.start()
        time.sleep(seconds)
        used = meter.stop()
        deadline = time.time() + drain
        while time.time() < deadline and receiver.count() < n:
            time.sleep(0.5)
        scheduler.stop()
        worker.stop()
        deliveries = receiver.deliveries()
    with pg_connect() as conn:
        stages = stage_lags(conn)
    lags = [a - datetime.fromisoformat(s).timestamp() for a, _id, s in deliveries if s]
    return {
        "n": n,
        "rate": rate,
        "seconds": seconds,
        "received": len(deliveries),
        "unique": len({d[1] for d in deliveries}),
        "lag": percentiles(lags),
        "stages": stages,
        "cpu": {name: value / meter.wall for name, value in used.items()},
    }


def main() -> None:
    parser = base_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=100.0, help="fires per second (default 100)")
    parser.add_argument("--seconds", type=float, help="duration of the stream (default 60; --quick 30)")
    parser.add_argument("--runs", type=int, default=1, help="repeat (default 1)")
    parser.add_argument("--tenants", type=int, default=100, help="tenants the jobs are spread over (default 100)")
    args = parser.parse_args()
    seconds = args.seconds or (30.0 if args.quick else 60.0)
    if not args.no_setup:
        ensure_database()
    tenants = bench_tenants(args.tenants)
    results = []
    for run in range(args.runs):
        log(f"steady: run {run + 1}/{args.runs}")
        result = run_once(rate=args.rate, seconds=seconds, tenants=tenants)
        log(f"steady: lag p50 {fmt(result['lag']['p50'], ' s', 3)}, p99 {fmt(result['lag']['p99'], ' s', 3)}")
        results.append(result)
    reset_state()

    rep = Report("Steady: a constant stream of fires", args.md)
    rep.add(
        f"{args.rate:g} fires/s for {seconds:g} s (`once` jobs of {args.tenants} tenants, run_at spaced 1/rate "
        "apart); 1 scheduler, "
        "1 worker (prefork, concurrency 2). Fire lag = receiver arrival - Chime-Scheduled-For. "
        "Goal: p50 < 0.25 s, p99 < 1 s.\n"
    )
    rep.add(
        table(
            ["run", "fires", "received (unique ids)", "lag p50", "p95", "p99", "max"],
            [
                [i + 1, f"{r['n']:,}", f"{r['received']:,} ({r['unique']:,})"]
                + [fmt(r["lag"][k], " s", 3) for k in ("p50", "p95", "p99", "max")]
                for i, r in enumerate(results)
            ],
        )
    )
    rep.add("\nStage times per run, seconds after the fire time (from the JobRun rows):\n")
    rep.add(
        table(
            ["run", "stage", "p50", "p95", "p99", "max"],
            [
                [i + 1, label] + [fmt(stats[k], " s", 3) for k in ("p50", "p95", "p99", "max")]
                for i, r in enumerate(results)
                for label, stats in r["stages"].items()
            ],
        )
    )
    rep.add("\nCPU use during the stream (share of one core):\n")
    names = list(results[0]["cpu"])
    rep.add(
        table(
            ["run", *names],
            [[i + 1] + [f"{100 * r['cpu'][n]:.0f}%" for n in names] for i, r in enumerate(results)],
        )
    )
    rep.save()


if __name__ == "__main__":
    main()
