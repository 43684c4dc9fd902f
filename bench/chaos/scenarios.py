"""The faults, one per scenario. Each `inject` blocks until the fault is over and says when it began
and when it was lifted (the server is back, the process is restarted and ready, SIGCONT is sent).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from .harness import Cluster, Fault

REDIS_DOWN_SECONDS = 2.0
SIGTERM_GRACE_SECONDS = 30.0  # a PaaS's usual wait between SIGTERM and SIGKILL
SIGSTOP_SECONDS = 30.0
SCHEDULER_SPREAD = 20.0


@dataclass
class Scenario:
    name: str
    description: str
    inject: Callable[[Cluster], Fault]
    redis_appendonly: bool = False
    # Seconds the spike's occurrences are spread over. A scheduler fault only shows while runs
    # still come due; the others hit a spike due at one instant.
    spread: float = 0.0


def no_fault(cluster: Cluster) -> Fault:
    now = time.time()
    return Fault(now, now)


def redis_restart(cluster: Cluster) -> Fault:
    """kill -9 redis-server, start it again on the same port after 2 s (empty unless append-only)."""
    t0 = time.time()
    cluster.redis.kill(signal.SIGKILL)
    time.sleep(REDIS_DOWN_SECONDS)
    cluster.redis.start()
    return Fault(t0, time.time(), details={"down_seconds": REDIS_DOWN_SECONDS})


def pg_restart(mode: str) -> Callable[[Cluster], Fault]:
    def inject(cluster: Cluster) -> Fault:
        t0 = time.time()
        cluster.pg.restart(mode)
        lifted = time.time()
        return Fault(t0, lifted, details={"restart_seconds": round(lifted - t0, 2)})

    return inject


def worker_sigkill(cluster: Cluster) -> Fault:
    """SIGKILL to the worker's whole process group (main process and pool children), restart."""
    t0 = time.time()
    cluster.workers[0].kill()
    cluster.restart_worker(0)
    return Fault(t0, time.time())


def worker_sigterm(cluster: Cluster) -> Fault:
    """SIGTERM to the worker's main process, as a PaaS sends it; SIGKILL after 30 s; restart."""
    worker = cluster.workers[0]
    t0 = time.time()
    worker.signal_main(signal.SIGTERM)
    exited = worker.wait(SIGTERM_GRACE_SECONDS)
    took = time.time() - t0
    notes = []
    if not exited:
        notes.append(f"worker did not exit within {SIGTERM_GRACE_SECONDS:g} s of SIGTERM: killed")
        worker.signal_group(signal.SIGUSR2)  # every process's thread stacks into its log (config/celery.py)
        time.sleep(1)
        worker.kill()
    else:
        worker.stop()  # reaps, closes the log, and kills any pool child left behind
    cluster.restart_worker(0)
    details = {"shutdown_seconds": round(took, 2), "exited_by_itself": exited}
    return Fault(t0, time.time(), notes=notes, details=details)


def scheduler_sigkill(cluster: Cluster) -> Fault:
    """SIGKILL to one of two schedulers; not restarted: the other takes its partitions over."""
    victim, survivor = cluster.schedulers[0], cluster.schedulers[1]
    t0 = time.time()
    victim.kill()
    cluster.schedulers.remove(victim)  # killed on purpose: not a crash
    return Fault(t0, t0, details={"takeover_seconds": takeover_seconds(survivor, t0, wait=25)})


def scheduler_sigstop(cluster: Cluster) -> Fault:
    """SIGSTOP one of two schedulers (inside a database transaction when we can catch it there)
    for 30 s, then SIGCONT."""
    victim, survivor = cluster.schedulers[0], cluster.schedulers[1]
    t0, caught = stop_inside_transaction(cluster, victim)
    time.sleep(SIGSTOP_SECONDS)
    victim.signal_group(signal.SIGCONT)
    lifted = time.time()
    notes = [] if caught else ["the scheduler could not be caught inside a transaction: stopped outside one"]
    details = {
        "stopped_in_transaction": caught is not None,
        "stopped_holding_locks": caught == "holding locks",
        "stopped_seconds": round(lifted - t0, 1),
        "takeover_seconds": takeover_seconds(survivor, t0),
    }
    return Fault(t0, lifted, notes=notes, details=details)


SCENARIOS = {
    s.name: s
    for s in [
        Scenario("none", "baseline: no fault", no_fault),
        Scenario("redis-restart", "kill -9 Redis (no persistence), same port again after 2 s: empty", redis_restart),
        Scenario(
            "redis-restart-aof",
            "the same with --appendonly yes (for comparison)",
            redis_restart,
            redis_appendonly=True,
        ),
        Scenario("pg-restart-fast", "pg_ctl restart -m fast", pg_restart("fast")),
        Scenario("pg-restart-immediate", "pg_ctl restart -m immediate (crash recovery)", pg_restart("immediate")),
        Scenario("worker-sigkill", "SIGKILL to the worker's process group, restarted", worker_sigkill),
        Scenario("worker-sigterm", "SIGTERM to the worker (graceful, 30 s), restarted", worker_sigterm),
        Scenario("scheduler-sigkill", "SIGKILL to one of two schedulers", scheduler_sigkill, spread=SCHEDULER_SPREAD),
        Scenario(
            "scheduler-sigstop",
            "SIGSTOP one of two schedulers inside a transaction for 30 s, then SIGCONT",
            scheduler_sigstop,
            spread=SCHEDULER_SPREAD,
        ),
    ]
}


# --- helpers --------------------------------------------------------------------------------

LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*now holding (\d+) partitions", re.M)


def takeover_seconds(survivor, since: float, wait: float = 0.0) -> float | None:
    """Seconds from `since` until the survivor logged holding all 64 partitions (asctime is local),
    waiting up to `wait` seconds for that line."""
    deadline = time.time() + wait
    while True:
        for stamp, held in LOG_TIME.findall(survivor.log()):
            when = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()
            if when >= since and int(held) == 64:
                return round(when - since, 2)
        if time.time() >= deadline:
            return None
        time.sleep(0.5)


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    return inodes


def client_ports(pid: int, server_port: int) -> list[int]:
    """Local ports of `pid`'s TCP connections to 127.0.0.1:server_port (from /proc/net/tcp)."""
    inodes = _socket_inodes(pid)
    ports = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            fields = line.split()
            local, remote, inode = fields[1], fields[2], fields[9]
            if inode in inodes and int(remote.split(":")[1], 16) == server_port:
                ports.append(int(local.split(":")[1], 16))
    return ports


TRANSACTIONS_SQL = (
    "SELECT state, backend_xid IS NOT NULL FROM pg_stat_activity "
    "WHERE client_port = ANY(%s) AND xact_start IS NOT NULL AND state IN ('active', 'idle in transaction')"
)


def stop_inside_transaction(cluster: Cluster, victim, tries_for: float = 15.0) -> tuple[float, str | None]:
    """SIGSTOP `victim` while one of its connections is inside a transaction, preferably one that
    has written or locked rows (it has a transaction id): watch pg_stat_activity every few ms,
    stop the process when it is seen in one, and keep it stopped if it still is 50 ms later (else
    SIGCONT and watch again). After half of `tries_for` any open transaction will do; after all of
    it, the process is stopped wherever it is.

    Returns (when it was stopped for good, "holding locks" / "in a transaction" / None).
    """
    start = time.time()
    ports, ports_at = [], 0.0
    with cluster.connect() as conn:
        while time.time() - start < tries_for:
            if time.time() - ports_at > 1.0:
                ports, ports_at = client_ports(victim.pid, cluster.pg.port), time.time()
            want_locks = time.time() - start < tries_for / 2
            if ports and _caught(conn, ports, want_locks):
                t0 = time.time()
                victim.signal_group(signal.SIGSTOP)
                time.sleep(0.05)  # a statement in flight finishes on the server; the client is frozen
                rows = conn.execute(TRANSACTIONS_SQL, [ports]).fetchall()
                if any(state == "idle in transaction" and (locks or not want_locks) for state, locks in rows):
                    return t0, "holding locks" if any(locks for _state, locks in rows) else "in a transaction"
                victim.signal_group(signal.SIGCONT)
            time.sleep(0.002)
    t0 = time.time()
    victim.signal_group(signal.SIGSTOP)
    return t0, None


def _caught(conn, ports: list[int], want_locks: bool) -> bool:
    rows = conn.execute(TRANSACTIONS_SQL, [ports]).fetchall()
    return any(locks or not want_locks for _state, locks in rows)
