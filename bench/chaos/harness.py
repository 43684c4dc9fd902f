"""One fault scenario from start to end, and what became of every run.

For a scenario: clone a migrated PostgreSQL cluster, start it and a Redis on private ports, start
the receiver, the worker(s) and the schedulers (production settings, as the Procfile runs them),
load a spike of `once` jobs due a few seconds ahead, inject the fault `fault_at` seconds after the
spike's first occurrence, wait until every run is terminal (or the timeout), stop everything
gracefully, then count from the rows and the receiver's records and run the auditor. Everything
started is stopped in a `finally`, and the workspace is deleted.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from .processes import PYTHON, ROOT, Receiver, chime_env, manage, start_scheduler, start_worker, stop_all
from .servers import PostgresServer, RedisServer, free_port, make_workspace, remove_workspace

DATABASE = "chime"
LINGER_SECONDS = 5.0
TERMINAL = ("succeeded", "failed", "cancelled", "skipped")
AUDIT_COMMAND = ROOT / "apps" / "jobs" / "management" / "commands" / "audit_runs.py"


@dataclass
class Options:
    runs: int = 3000
    tenants: int = 3
    spread: float | None = None  # occurrences spread over this many seconds (None: the scenario's)
    fault_at: float = 3.0  # seconds after the spike's first occurrence, or ...
    fault_fraction: float = 1 / 3  # ... once this share of the runs was delivered, if that comes first
    timeout: float = 400.0  # give up this long after the spike's first occurrence
    settle: float | None = None  # ... or this long after the fault was lifted, whichever is first
    lead: float = 5.0  # seconds between the end of the load and the first occurrence
    schedulers: int = 2
    code: Path = ROOT  # the Chime checkout whose processes run (the harness and auditor are this one)
    log_dir: Path = ROOT / "bench" / "results" / "logs" / "chaos"


@dataclass
class Fault:
    injected: float  # unix time the fault began
    lifted: float  # unix time it ended: server back, process restarted and ready, SIGCONT sent
    notes: list[str] = field(default_factory=list)
    details: dict = field(default_factory=dict)


class Cluster:
    """The private servers and the processes of one scenario."""

    def __init__(self, workspace: Path, log_dir: Path, *, template: Path, appendonly: bool, code: Path):
        self.log_dir = log_dir
        self.code = code
        self.pg = PostgresServer(workspace / "pgdata").copy_from(template)
        self.redis = RedisServer(workspace / "redis", appendonly=appendonly)
        self.receiver = Receiver(free_port(), log_dir)
        self.schedulers: list = []
        self.workers: list = []

    def env(self, process_type: str, code: Path | None = None) -> dict[str, str]:
        return chime_env(
            database_url=self.pg.url(DATABASE),
            redis_url=self.redis.url,
            process_type=process_type,
            code=code or self.code,
        )

    def start(self, schedulers: int) -> None:
        self.pg.start()
        self.redis.start()
        self.receiver.start()
        self.workers = [start_worker("worker-0", self.env("worker"), self.log_dir)]
        self.schedulers = [
            start_scheduler(f"scheduler-{i}", self.env("scheduler"), self.log_dir) for i in range(schedulers)
        ]

    def restart_worker(self, index: int = 0) -> None:
        self.workers[index] = start_worker(self.workers[index].name, self.env("worker"), self.log_dir)

    def connect(self):
        import psycopg

        return psycopg.connect(self.pg.dsn(DATABASE), autocommit=True)

    def crashed(self) -> dict[str, int]:
        """Processes that exited by themselves (not stopped by the fault or the harness): name -> code.
        Nothing supervises them here, unlike a PaaS: a crash must be seen, not papered over."""
        return {p.name: p.popen.returncode for p in [*self.schedulers, *self.workers] if not p.alive()}

    def stop_processes(self) -> dict[str, float | None]:
        """Schedulers, then workers (SIGTERM, 30 s), then the receiver; seconds each took to exit."""
        took = {}
        for process in [*self.schedulers, *self.workers]:
            took[process.name] = process.stop(timeout=30)
        return took

    def close(self) -> None:
        stop_all()
        self.redis.stop()
        self.pg.stop("immediate")
        for name, text in (("postgres.log", self.pg.log()), ("redis.log", self.redis.log())):
            (self.log_dir / name).write_text(text)


def build_template(workspace: Path, log_dir: Path, code: Path) -> Path:
    """initdb, create and migrate the database once; every scenario starts from a copy of it."""
    pg = PostgresServer(workspace / "template" / "pgdata").initdb()
    try:
        pg.start()
        pg.create_database(DATABASE)
        env = chime_env(
            database_url=pg.url(DATABASE), redis_url="redis://127.0.0.1:1/0", process_type="release", code=code
        )
        result = manage("migrate", "--noinput", env=env)
        log_dir.mkdir(parents=True, exist_ok=True)
        (log_dir / "migrate.log").write_text(result.stdout + result.stderr)
        if result.returncode != 0:
            raise RuntimeError(f"migrate failed:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}")
    finally:
        pg.stop("fast")
    return pg.datadir


def load_spike(cluster: Cluster, options: Options, spread: float) -> dict:
    args = [
        PYTHON, str(ROOT / "bench" / "chaos" / "load.py"),
        "--count", str(options.runs), "--tenants", str(options.tenants),
        "--lead", str(options.lead), "--spread", str(spread), "--url", cluster.receiver.url,
    ]  # fmt: skip
    env = cluster.env("manage")
    result = subprocess.run(args, cwd=env["PYTHONPATH"], env=env, capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise RuntimeError(f"load failed:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


COUNTS_SQL = (
    "SELECT count(*), count(*) FILTER (WHERE status IN ('succeeded', 'failed', 'cancelled', 'skipped')), "
    "count(*) FILTER (WHERE status = 'scheduled'), count(*) FILTER (WHERE status = 'queued'), "
    "count(*) FILTER (WHERE status = 'running'), count(*) FILTER (WHERE status = 'retrying') FROM jobs_jobrun"
)


class Poller(threading.Thread):
    """Samples the counts by status every 0.5 s into `timeline`, in the background (a fault may
    block the harness for 30 s), surviving the database going away (a fault may be a restart)."""

    def __init__(self, cluster: Cluster, runs: int, fire_at: float):
        super().__init__(daemon=True)
        self.cluster, self.runs, self.fire_at = cluster, runs, fire_at
        self.conn = None
        self.timeline: list[list] = []
        self.finished = threading.Event()  # every run materialized and terminal
        self.halt = threading.Event()

    def counts(self) -> tuple[int, ...] | None:
        try:
            if self.conn is None or self.conn.closed:
                self.conn = self.cluster.connect()
            return self.conn.execute(COUNTS_SQL).fetchone()
        except Exception:  # the database is restarting: no sample this time
            with contextlib.suppress(Exception):
                self.conn.close()
            self.conn = None
            return None

    def run(self) -> None:
        try:
            while not self.halt.is_set():
                counts = self.counts()
                if counts:
                    self.timeline.append([round(time.time() - self.fire_at, 1), *counts])
                    if counts[0] >= self.runs and counts[1] >= counts[0]:
                        self.finished.set()
                        return
                self.halt.wait(0.5)
        finally:
            with contextlib.suppress(Exception):
                self.conn.close()

    def stop(self) -> None:
        self.halt.set()
        self.join(10)


def run_scenario(scenario, options: Options, template: Path) -> dict:
    """Run one scenario (bench.chaos.scenarios.Scenario) and return its measured result."""
    log_dir = options.log_dir / scenario.name
    log_dir.mkdir(parents=True, exist_ok=True)
    for old in log_dir.glob("*"):
        old.unlink()
    workspace = make_workspace()
    result: dict = {"scenario": scenario.name, "runs": options.runs, "notes": []}
    cluster = None
    try:
        cluster = Cluster(
            workspace, log_dir, template=template, appendonly=scenario.redis_appendonly, code=options.code
        )
        cluster.start(schedulers=options.schedulers)
        spread = scenario.spread if options.spread is None else options.spread
        result["spread"] = spread
        spike = load_spike(cluster, options, spread)
        fire_at = spike["fire_at"]
        _wait_for_fault_time(cluster, fire_at + options.fault_at, options.fault_fraction * options.runs)
        poller = Poller(cluster, options.runs, fire_at)
        before = poller.counts()
        result["open_at_fault"] = options.runs - before[1] if before else None
        poller.start()
        try:
            fault = scenario.inject(cluster)
            result["notes"] += fault.notes
            result["fault"] = fault.details
            deadline = fire_at + options.timeout
            if options.settle is not None:
                deadline = min(deadline, fault.lifted + options.settle)
            poller.finished.wait(max(0.0, deadline - time.time()))
            # A few seconds after the fault even when all is done: what a resumed scheduler or a
            # late redelivery does right after the fault must be seen too.
            time.sleep(max(0.0, min(deadline, fault.lifted + LINGER_SECONDS) - time.time()))
        finally:
            poller.stop()
        result["finished"] = poller.finished.is_set()
        result["waited"] = round(time.time() - fire_at, 1)
        result["timeline"] = timeline = poller.timeline
        result["crashed"] = cluster.crashed()
        result["shutdown_seconds"] = cluster.stop_processes()
        deliveries = cluster.receiver.deliveries()
        result.update(_analyse(cluster, deliveries, options.runs))
        result.update(_times(deliveries, result.pop("_expected_ids"), fire_at, fault))
        result["all_terminal_after_fault"] = _all_terminal_after(timeline, options.runs, fault.injected - fire_at)
        result["audit"] = run_audit(cluster)
    finally:
        if cluster is not None:
            cluster.close()
        stop_all()
        remove_workspace(workspace)
    return result


def _wait_for_fault_time(cluster: Cluster, latest: float, delivered: float) -> None:
    """Until `latest`, or until the receiver has seen `delivered` requests: a fault must meet work
    in flight however fast this machine delivers the spike."""
    while time.time() < latest:
        with contextlib.suppress(OSError):
            if cluster.receiver.count() >= delivered:
                return
        time.sleep(0.05)


def _analyse(cluster: Cluster, deliveries: list, runs: int) -> dict:
    received = Counter(d[1] for d in deliveries)
    with cluster.connect() as conn:
        definitions = [str(r[0]) for r in conn.execute("SELECT id FROM jobs_jobdefinition").fetchall()]
        rows = conn.execute("SELECT id, definition_id, status FROM jobs_jobrun").fetchall()
        duplicate_runs = conn.execute(
            "SELECT count(*) - count(DISTINCT (definition_id, scheduled_for)) FROM jobs_jobrun"
        ).fetchone()[0]
        duplicate_numbers = conn.execute(
            "SELECT count(*) - count(DISTINCT (run_id, number)) FROM jobs_runattempt"
        ).fetchone()[0]
        doubly_succeeded = conn.execute(
            "SELECT count(*) FROM (SELECT run_id FROM jobs_runattempt WHERE status_code BETWEEN 200 AND 299 "
            "GROUP BY run_id HAVING count(*) > 1) AS s"
        ).fetchone()[0]
        kinds = dict(
            conn.execute(
                "SELECT coalesce(nullif(error_kind, ''), 'ok'), count(*) FROM jobs_runattempt GROUP BY 1"
            ).fetchall()
        )
    with_run = {str(r[1]) for r in rows}
    statuses = Counter(r[2] for r in rows)
    never_materialized = sum(1 for d in definitions if d not in with_run)
    terminal_undelivered = sum(1 for r in rows if r[2] in TERMINAL and str(r[0]) not in received)
    stuck = sum(1 for r in rows if r[2] not in TERMINAL)
    expected = {str(r[0]) for r in rows}
    return {
        "definitions": len(definitions),
        "materialized": len(rows),
        "delivered": sum(1 for run_id in expected if run_id in received),
        "lost": never_materialized + terminal_undelivered,
        "never_materialized": never_materialized,
        "stuck": stuck,
        "statuses": dict(statuses),
        "duplicate_rows": duplicate_runs + duplicate_numbers + doubly_succeeded,
        "duplicate_rows_detail": {
            "runs_per_occurrence": duplicate_runs,
            "attempt_numbers": duplicate_numbers,
            "runs_with_two_2xx_attempts": doubly_succeeded,
        },
        "received": len(deliveries),
        "duplicate_deliveries": len(deliveries) - len(received),
        "unexpected_deliveries": sum(n for run_id, n in received.items() if run_id not in expected),
        "attempts": kinds,
        "_expected_ids": expected,
    }


def _times(deliveries: list, expected: set[str], fire_at: float, fault: Fault) -> dict:
    """Seconds to the last first delivery of any run: from the spike, the fault and its lifting."""
    first: dict[str, float] = {}
    lags = []
    for arrival, webhook_id, scheduled_for in deliveries:
        if webhook_id in expected and webhook_id not in first:
            first[webhook_id] = arrival
            with contextlib.suppress(ValueError):
                lags.append(arrival - datetime.fromisoformat(scheduled_for).timestamp())
    last = max(first.values()) if first and len(first) == len(expected) else None
    lags.sort()
    return {
        "fire_lag_p50": round(lags[len(lags) // 2], 2) if lags else None,
        "fire_lag_max": round(lags[-1], 2) if lags else None,
        "fault_injected": round(fault.injected - fire_at, 2),
        "fault_lifted": round(fault.lifted - fire_at, 2),
        "all_delivered_after_spike": round(last - fire_at, 2) if last else None,
        "all_delivered_after_fault": round(last - fault.injected, 2) if last else None,
        "all_delivered_after_recovery": round(max(0.0, last - fault.lifted), 2) if last else None,
    }


def _all_terminal_after(timeline: list[list], runs: int, fault_offset: float) -> float | None:
    """Seconds from the fault to the first poll (every 0.5 s) that found every run terminal."""
    for t, materialized, terminal, *_ in timeline:
        if materialized >= runs and terminal >= materialized:
            return round(max(0.0, t - fault_offset), 1)
    return None


def run_audit(cluster: Cluster) -> dict:
    """`manage.py audit_runs --json` of this checkout, against the scenario's database."""
    if not AUDIT_COMMAND.exists():
        return {"ran": False, "note": "manage.py audit_runs does not exist yet: audit skipped"}
    result = manage("audit_runs", "--json", env=cluster.env("manage", code=ROOT), timeout=120)
    out = {"ran": True, "exit_code": result.returncode}
    try:
        parsed = json.loads(result.stdout)
    except ValueError:
        out.update(violations=None, error=(result.stdout + result.stderr)[-2000:])
        return out
    violations = parsed.get("violations", parsed) if isinstance(parsed, dict) else parsed
    out["violations"] = violations if isinstance(violations, int) else len(violations)
    out["report"] = parsed
    if result.returncode != 0 and not out["violations"]:
        out["error"] = result.stderr[-2000:]
    return out
