"""bench/model.py, the load model of docs/scaling.md: its arithmetic on given inputs, and that a
peers run's JSON (bench/peers.py --json) replaces the defaults and is named as their source.
Pure arithmetic: no database, no processes."""

import json

from bench.model import need, parse, report


def test_worker_count_is_the_larger_of_cpu_and_in_flight_bounds():
    args = parse(["--core-busy", "0.5", "--latency-s", "0.4", "--scheduler-cpu-ms", "0.1", "--pg-aux-cpu-ms", "0"])
    # 10,000 fires/s x 0.4 s = 4,000 requests in flight / 200 per process = 20 processes;
    # CPU: 10,000 x 1 ms / 0.5 = 20 cores -> 20 as well; at 2 ms per run CPU decides.
    slow = need(args, 10_000, pg_ms=0.2, worker_ms=2.0, wal=1000, window=200, chunk=50)
    assert (slow.worker_processes, slow.worker_bound) == (40, "CPU")
    fast = need(args, 10_000, pg_ms=0.2, worker_ms=0.1, wal=1000, window=200, chunk=50)
    assert (fast.worker_processes, fast.worker_bound) == (20, "in-flight requests")
    assert fast.db_cores == 10_000 * 0.2 / 1000 / 0.5
    assert fast.wal_mbps == 10.0
    assert fast.broker_messages == 200
    assert fast.scheduler_processes == 2


def test_schedulers_never_exceed_the_partitions():
    args = parse(["--scheduler-cpu-ms", "10", "--partitions", "64"])
    assert need(args, 1_000_000, pg_ms=0.2, worker_ms=1, wal=1, window=200, chunk=50).scheduler_processes == 64


def test_from_peers_takes_the_chime_and_hand_rolled_rows(tmp_path):
    def row(design, pg, workers):
        return {
            "design": design, "profile": "realistic", "n": 1000, "delivered": 1000,
            "cpu": {"postgres (this db)": pg, "workers": workers, "scheduler": 0.05, "postgres aux (share)": 0.01},
            "wal": {"bytes": 2_000_000}, "db_stats": {"xact_commit": 50}, "table_bytes": 1_500_000,
            "definition_bytes": 900.0,
        }  # fmt: skip

    path = tmp_path / "peers.json"
    path.write_text(json.dumps([row("chime", 0.3, 1.2), row("handrolled", 0.9, 6.0)]))
    args = parse(["--from-peers", str(path), "--profile", "realistic"])
    assert round(args.pg_cpu_ms, 6) == 0.3
    assert round(args.worker_cpu_ms, 6) == 1.2
    assert args.wal_bytes == 2000
    assert args.commits == 0.05
    assert args.run_bytes == 1500
    assert round(args.peer_worker_cpu_ms, 6) == 6.0
    assert args.sources["pg_cpu_ms"] == f"{path} (realistic)"
    text = report(args)
    assert f"{path} (realistic)" in text and "hand-rolled, peak" in text
