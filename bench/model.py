"""Load model: from measured per-run costs to processes, cores, WAL, IOPS and connections at a scale.

Nothing here is measured: it multiplies. Every per-run cost is an input (a flag) whose default is a
measurement, printed with its source; the capacity figures (how busy a core may be, what one
primary sustains) are assumptions, printed as such. Re-run it with the numbers of a newer bench:

    python -m bench.model                                   # the defaults (docs/scaling.md quotes this)
    python -m bench.model --pg-cpu-ms 0.25 --worker-cpu-ms 0.25   # issue #12's targets
    python -m bench.model --from-peers bench/results/peers.json   # the chime row of a peers run
    python -m bench.model --peak-fires 33333 --average-fires 3000 --definitions 10000000

The peak is the top-of-the-hour minute (2M runs in 60 s = 33,333 fires/s); the average sets the
storage and the daily volume. "Chime" uses Chime's per-run costs and its worker's request window;
"hand-rolled" uses the peers bench's hand-rolled design (one request in flight per prefork child).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable as `python bench/x.py` too


@dataclass
class Input:
    value: float
    source: str
    help: str


# Per-run costs measured by bench/peers.py (docs/benchmarks.md#peers). Chime: the realistic row of
# bench/results/peers-db-reuse-off.json (N=20,000, 15:57-15:59 UTC, bench code of 33900b6 + the
# --chime-worker-settings flag, apps/ as on main dbdb4ee; load average 2.4-3.0 and the other
# sessions nearly idle: the server's WAL was within 5 % of the bench's). PostgreSQL CPU is the whole
# server's there (1.06 ms; WAL writer etc. included), because the per-backend count (0.58 ms) misses
# the connection a worker opens every ~21 runs (docs/scaling.md "noticed on the way"); with
# CELERY_DB_REUSE_MAX both counts agree at 0.75-0.77 ms (peers-db-reuse-on.json).
# Hand-rolled: its instant row in the --quick run (4,992 of 5,000 delivered, so its costs are not
# diluted by rows queued but never sent, as in the 20,000 runs; bench code d80373a).
SOURCE = "bench/results/peers-db-reuse-off.json, chime, realistic, N=20,000"
PEER = "bench/peers.py --quick, hand-rolled, instant, 4,992 runs (d80373a)"
MEASURED = {
    "pg_cpu_ms": Input(1.06, SOURCE + ", all postgres processes", "PostgreSQL CPU ms per run (backends)"),
    "pg_aux_cpu_ms": Input(0.0, SOURCE + " (included in --pg-cpu-ms there)", "WAL writer + checkpointer + bgwriter"),
    "worker_cpu_ms": Input(1.78, SOURCE, "Celery worker CPU ms per run (all processes of the worker)"),
    "scheduler_cpu_ms": Input(0.10, SOURCE, "scheduler CPU ms per run (materialize + release)"),
    "wal_bytes": Input(3203, SOURCE, "WAL bytes per run (the bench database's records, pg_walinspect)"),
    "commits": Input(0.55, SOURCE, "transactions committed per run (pg_stat_database.xact_commit)"),
    "run_bytes": Input(1301, SOURCE, "bytes per run in jobs_jobrun + jobs_runattempt (heap, indexes, TOAST)"),
    "definition_bytes": Input(353, SOURCE, "bytes per definition in jobs_jobdefinition (heap, indexes, TOAST)"),
    "latency_s": Input(0.377, "bench/profiles.py Realistic: mean of min(latency, 10 s timeout), 50,000 keys",
                       "mean time a request holds a slot (the realistic profile)"),
    "peer_pg_cpu_ms": Input(0.52, PEER, "hand-rolled: PostgreSQL CPU ms per run"),
    "peer_worker_cpu_ms": Input(4.06, PEER, "hand-rolled: worker CPU ms per run"),
    "peer_wal_bytes": Input(1066, PEER, "hand-rolled: WAL bytes per run"),
    "peer_run_bytes": Input(306, "bench/results/peers.json, hand-rolled (f11eec3)", "hand-rolled: table bytes per run"),
}  # fmt: skip
ASSUMED = {
    "core_busy": Input(0.6, "assumption: headroom for bursts and failover", "share of a core a process may use"),
    "window": Input(200, "config/settings/base.py CHIME_WORKER_MAX_IN_FLIGHT", "requests in flight per worker"),
    "chunk": Input(50, "CHIME_ENQUEUE_CHUNK when the costs were measured (200 since)", "run ids per Celery message"),
    "redis_ops_per_message": Input(6, "assumption: LPUSH, BRPOP, unacked HSET+ZADD, ack HDEL+ZREM", "Redis commands"),
    "worker_pool": Input(4, "config/settings/base.py DB_POOL_DEFAULT_MAX worker", "DB connections per worker"),
    "scheduler_pool": Input(3, "config/settings/base.py DB_POOL_DEFAULT_MAX scheduler", "DB connections/scheduler"),
    "partitions": Input(64, "config/settings/base.py CHIME_PARTITIONS", "scheduler partitions (max schedulers)"),
    "primary_cores": Input(64, "assumption: one large primary (64 vCPU)", "cores of the biggest primary"),
    "primary_wal_mbps": Input(150, "assumption: WAL a primary and its replicas sustain", "MB/s of WAL"),
    "page_write_factor": Input(2.0, "assumption: index pages and pages rewritten in later checkpoints",
                               "data page writes = run bytes / 8 KiB x this"),
    "retention_days": Input(7, "assumption: run history kept online", "days of runs kept"),
}  # fmt: skip


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--definitions", type=float, default=10_000_000, help="job definitions (default 10M)")
    parser.add_argument("--peak-fires", type=float, default=2_000_000 / 60, help="fires/s in the peak minute")
    parser.add_argument("--average-fires", type=float, default=3000, help="fires/s on average (default 3,000)")
    parser.add_argument("--from-peers", metavar="JSON", help="take the per-run costs from a bench/peers.py --json")
    parser.add_argument("--profile", default="instant", help="which receiver row of --from-peers (default instant)")
    parser.add_argument(
        "--pg-server",
        action="store_true",
        help="with --from-peers: PostgreSQL CPU of the whole server (right only when the others were idle), not of "
        "the bench database's live backends (which misses connections shorter than 0.1 s)",
    )
    for name, item in {**MEASURED, **ASSUMED}.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=float, default=item.value, help=item.help)
    args = parser.parse_args(argv)
    args.sources = {name: item.source for name, item in {**MEASURED, **ASSUMED}.items()}
    for name, item in {**MEASURED, **ASSUMED}.items():
        if getattr(args, name) != item.value:
            args.sources[name] = "command line"
    if args.from_peers:
        apply_peers(args, json.loads(Path(args.from_peers).read_text()))
    return args


def apply_peers(args: argparse.Namespace, results: list[dict]) -> None:
    """The chime and hand-rolled rows of one peers run (same profile; its last round) as the per-run costs."""
    rows = {r["design"]: r for r in results if r["profile"] == args.profile}
    source = f"{args.from_peers} ({args.profile})"
    for design, prefix in (("chime", ""), ("handrolled", "peer_")):
        r = rows.get(design)
        # A design that did not deliver its N by the deadline queued (and paid for) more runs than
        # it delivered: its costs per delivered run are inflated, so keep the defaults.
        if not r or r["delivered"] < 0.95 * r["n"]:
            continue
        runs = max(1, min(r["delivered"], r["n"]))
        pg = r["cpu"]["postgres (all)" if args.pg_server else "postgres (this db)"]
        values = {
            "pg_cpu_ms": 1000 * pg / runs,
            "worker_cpu_ms": 1000 * r["cpu"]["workers"] / runs,
            "wal_bytes": r["wal"]["bytes"] / runs,
        }
        if design == "chime":
            values["pg_aux_cpu_ms"] = 0.0 if args.pg_server else 1000 * r["cpu"].get("postgres aux (share)", 0.0) / runs
            values["scheduler_cpu_ms"] = 1000 * r["cpu"]["scheduler"] / runs
            values["commits"] = r["db_stats"]["xact_commit"] / runs
            if r.get("table_bytes"):
                values["run_bytes"] = r["table_bytes"] / r["n"]
            if r.get("definition_bytes"):
                values["definition_bytes"] = r["definition_bytes"]
        for name, value in values.items():
            setattr(args, prefix + name, value)
            args.sources[prefix + name] = source


@dataclass
class Need:
    fires: float
    worker_cores: float
    worker_processes: int
    worker_bound: str
    scheduler_processes: int
    db_cores: float
    primaries_by_cpu: int
    wal_mbps: float
    primaries_by_wal: int
    fsyncs: float
    data_iops: float
    broker_messages: float
    redis_ops: float
    connections: int


def need(
    args,
    fires: float,
    *,
    pg_ms: float,
    worker_ms: float,
    wal: float,
    window: float,
    chunk: float,
    pool: float = 0,
    run_bytes: float = 0,
) -> Need:
    """What `fires` per second need; a worker process uses at most one core (Chime's: one event loop;
    a prefork child: one request at a time), and holds `pool` connections (default --worker-pool)."""
    busy = args.core_busy
    by_cpu = fires * worker_ms / 1000 / busy
    by_window = fires * args.latency_s / window  # Little's law: requests in flight / slots per process
    workers = math.ceil(max(by_cpu, by_window))
    pool = pool or args.worker_pool
    run_bytes = run_bytes or args.run_bytes
    schedulers = min(int(args.partitions), math.ceil(fires * args.scheduler_cpu_ms / 1000 / busy))
    db_cores = fires * (pg_ms + args.pg_aux_cpu_ms) / 1000 / busy
    wal_mbps = fires * wal / 1e6
    return Need(
        fires=fires,
        worker_cores=by_cpu,
        worker_processes=workers,
        worker_bound="CPU" if by_cpu >= by_window else "in-flight requests",
        scheduler_processes=max(1, schedulers),
        db_cores=db_cores,
        primaries_by_cpu=math.ceil(db_cores / args.primary_cores),
        wal_mbps=wal_mbps,
        primaries_by_wal=math.ceil(wal_mbps / args.primary_wal_mbps),
        fsyncs=fires * args.commits,
        data_iops=fires * run_bytes / 8192 * args.page_write_factor,
        broker_messages=fires / chunk,
        redis_ops=fires / chunk * args.redis_ops_per_message,
        connections=int(workers * pool + max(1, schedulers) * args.scheduler_pool),
    )


def fmt(value: float, digits: int = 0) -> str:
    return f"{value:,.{digits}f}"


def table(headers: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])


def report(args) -> str:
    chime_peak = need(args, args.peak_fires, pg_ms=args.pg_cpu_ms, worker_ms=args.worker_cpu_ms,
                      wal=args.wal_bytes, window=args.window, chunk=args.chunk)  # fmt: skip
    chime_avg = need(args, args.average_fires, pg_ms=args.pg_cpu_ms, worker_ms=args.worker_cpu_ms,
                     wal=args.wal_bytes, window=args.window, chunk=args.chunk)  # fmt: skip
    peer_peak = need(args, args.peak_fires, pg_ms=args.peer_pg_cpu_ms, worker_ms=args.peer_worker_cpu_ms,
                     wal=args.peer_wal_bytes, window=1, chunk=1, pool=1, run_bytes=args.peer_run_bytes)  # fmt: skip
    columns = [("Chime, peak", chime_peak), ("Chime, average", chime_avg), ("hand-rolled, peak", peer_peak)]
    rows = [
        ["fires/s", *(fmt(n.fires) for _, n in columns)],
        ["worker cores (CPU at --core-busy)", *(fmt(n.worker_cores, 1) for _, n in columns)],
        ["worker processes (bound by)", *(f"{n.worker_processes:,} ({n.worker_bound})" for _, n in columns)],
        ["scheduler processes", *(f"{n.scheduler_processes:,}" for _, n in columns[:2]), "(a scan loop)"],
        ["PostgreSQL cores", *(fmt(n.db_cores, 1) for _, n in columns)],
        ["primaries needed by CPU", *(f"{n.primaries_by_cpu:,}" for _, n in columns)],
        ["WAL MB/s", *(fmt(n.wal_mbps, 1) for _, n in columns)],
        ["primaries needed by WAL", *(f"{n.primaries_by_wal:,}" for _, n in columns)],
        ["WAL fsyncs/s (at most: commits/s)", *(fmt(n.fsyncs) for _, n in columns[:2]), "—"],
        ["data page writes/s (IOPS)", *(fmt(n.data_iops) for _, n in columns)],
        ["broker messages/s", *(fmt(n.broker_messages) for _, n in columns)],
        ["Redis commands/s", *(fmt(n.redis_ops) for _, n in columns)],
        ["PostgreSQL connections", *(f"{n.connections:,}" for _, n in columns)],
    ]
    runs_per_day = args.average_fires * 86400
    storage = [
        ["definitions", fmt(args.definitions), f"{args.definitions * args.definition_bytes / 1e9:,.1f} GB"],
        ["runs per day (average x 86,400)", fmt(runs_per_day), f"{runs_per_day * args.run_bytes / 1e9:,.0f} GB"],
        [f"runs kept ({args.retention_days:g} days)", fmt(runs_per_day * args.retention_days),
         f"{runs_per_day * args.retention_days * args.run_bytes / 1e12:,.2f} TB"],
        ["WAL per day", "", f"{runs_per_day * args.wal_bytes / 1e12:,.2f} TB"],
    ]  # fmt: skip
    inputs = [
        [f"--{name.replace('_', '-')}", f"{getattr(args, name):,.4g}", args.sources[name]]
        for name in {**MEASURED, **ASSUMED}
    ]
    return "\n".join(
        [
            f"# Load model: {args.definitions:,.0f} definitions, peak {args.peak_fires:,.0f} fires/s, "
            f"average {args.average_fires:,.0f} fires/s",
            "",
            table(["", *(name for name, _ in columns)], rows),
            "",
            table(["storage", "count", "bytes"], storage),
            "",
            "Inputs (per run unless said otherwise):",
            "",
            table(["flag", "value", "source"], inputs),
        ]
    )


def main(argv: list[str] | None = None) -> None:
    print(report(parse(argv)))


if __name__ == "__main__":
    main()
