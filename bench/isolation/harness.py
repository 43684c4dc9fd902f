"""The isolation bench's cluster and phases (issue #10): real Procfile processes on private servers.

A run starts a private PostgreSQL (a clone of a cluster migrated by the tree under test) and Redis
(bench/chaos/servers.py), the bench receiver listening on several loopback addresses (so tenants'
endpoints are different hosts), and the tree's own `scheduler` and `worker` Procfile lines with
production settings (bench/chaos/processes.py `chime_env`: every CHIME_* of the caller dropped, so
the defaults are measured). Then, per round, in this order:

1. **raw**: aiohttp itself against the instant receiver (the ceiling, and proof that the receiver
   is not the bottleneck), and a client-side check of the realistic profile.
2. **instant** / **realistic**: `runs` once-jobs of `tenants` tenants over `hosts` hosts, all due
   at one instant, 1 attempt each, `timeout_seconds` each; the realistic endpoint answers after a
   seeded log-normal latency (bench/profiles.py), 1 % of requests hang past the timeout.
3. **alone** / **beside-slow**: tenant B's `other_runs` runs due one by one while (in the second)
   tenant A's `slow_runs` runs, due at once just before, are each held `hold_seconds` by A's host.

Between phases the job tables are emptied; the processes keep running. Everything started is
stopped in a `finally` (and dies with this process: PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import time
import urllib.request
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from pathlib import Path

from bench.chaos.harness import build_template
from bench.chaos.processes import PYTHON, ROOT, ChimeProcess, chime_env, stop_all
from bench.chaos.servers import PostgresServer, RedisServer, free_port, make_workspace, remove_workspace
from bench.profiles import Realistic

DATABASE = "chime"
TERMINAL = ("succeeded", "failed", "cancelled", "skipped")
LOADER = ROOT / "bench" / "isolation" / "load.py"


@dataclass(frozen=True)
class Sizes:
    runs: int = 3000  # per throughput phase, all due at one instant
    tenants: int = 20  # ... spread over this many tenants
    hosts: int = 10  # ... and this many endpoint hosts (127.0.0.1 .. 127.0.0.N)
    timeout_seconds: int = 10  # the jobs' timeout; hanging requests are held 2 s longer
    slow_runs: int = 60  # tenant A, due at once at an endpoint holding each request hold_seconds
    hold_seconds: float = 25.0
    other_runs: int = 20  # tenant B, due one by one while A's requests are held
    other_offset: float = 2.0  # B's first run is due this long after A's
    other_step: float = 0.5
    raw_requests: int = 5000
    raw_in_flight: int = 200
    check_requests: int = 1000  # client-side check of the realistic profile
    check_in_flight: int = 100  # well under the ceiling: measures the profile, not client queueing
    concurrency: int = 2  # WORKER_CONCURRENCY for the Procfile's worker line
    rounds: int = 2
    seed: int = 1
    lead: float = 4.0  # seconds from the end of a load to the first occurrence
    deadline: float = 400.0  # give up on a phase this long after its first occurrence

    @property
    def profile(self) -> Realistic:
        return Realistic(seed=self.seed, hang_seconds=self.timeout_seconds + 2.0)

    @property
    def slow_timeout(self) -> int:
        return int(self.hold_seconds) + 5  # A's requests are answered, slowly, not timed out


FULL = Sizes()
QUICK = replace(FULL, runs=600, slow_runs=30, hold_seconds=12.0, other_runs=10, raw_requests=3000, check_requests=500)
# The test suite's form: a complete report in well under a minute, no speed in it.
TINY = replace(
    FULL, runs=40, tenants=3, hosts=2, timeout_seconds=2, slow_runs=4, hold_seconds=3.0, other_runs=4,
    other_offset=0.5, other_step=0.3, raw_requests=300, raw_in_flight=50, check_requests=60, check_in_flight=60,
    rounds=1, lead=2.0, deadline=60.0,
)  # fmt: skip


def load_average() -> str:
    """/proc/loadavg's 1, 5 and 15 minute averages: how busy the shared machine was."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def procfile(code: Path) -> dict[str, str]:
    """The tree's Procfile: process type -> command line."""
    out = {}
    for line in (code / "Procfile").read_text().splitlines():
        name, sep, command = line.partition(":")
        if sep and name.strip() and not name.startswith("#"):
            out[name.strip()] = command.strip()
    return out


def revision(code: Path) -> str:
    try:
        head = subprocess.run(
            ["git", "-C", str(code), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        branch = subprocess.run(
            ["git", "-C", str(code), "rev-parse", "--abbrev-ref", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(code), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        ahead = subprocess.run(
            ["git", "-C", str(code), "rev-list", "--count", "main..HEAD"], capture_output=True, text=True, check=False
        ).stdout.strip()
        base = subprocess.run(
            ["git", "-C", str(code), "merge-base", "HEAD", "main"], capture_output=True, text=True, check=False
        ).stdout.strip()[:7]
        relation = f", main {base} + {ahead} commits" if ahead not in ("", "0") and base else ""
        return f"{branch} {head}{relation}" + (" (+ uncommitted changes)" if dirty else "")
    except (subprocess.CalledProcessError, OSError):
        return str(code)


class ProfileReceiver(ChimeProcess):
    """bench/receiver.py on 127.0.0.1 .. 127.0.0.N with the run's realistic profile."""

    def __init__(self, log_dir: Path, hosts: int, profile: Realistic):
        self.port = free_port()
        dump = log_dir / "deliveries.jsonl"
        args = [
            PYTHON, str(ROOT / "bench" / "receiver.py"), "--port", str(self.port), "--dump", str(dump),
            "--hosts", str(hosts), "--seed", str(profile.seed), "--median", str(profile.median),
            "--p99", str(profile.p99), "--hang-share", str(profile.hang_share),
            "--hang-seconds", str(profile.hang_seconds),
        ]  # fmt: skip
        super().__init__("receiver", args, {**os.environ, "PYTHONPATH": str(ROOT)}, log_dir)

    def base(self, host: int = 1) -> str:
        return f"http://127.0.0.{host}:{self.port}"

    def start(self) -> ProfileReceiver:
        super().start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"receiver exited:\n{self.log()[-3000:]}")
            with contextlib.suppress(OSError):
                self.records()
                return self
            time.sleep(0.1)
        raise TimeoutError("receiver not up within 30 s")

    def records(self, clear: bool = False) -> list[list]:
        """[(arrival unix time, webhook-id, Chime-Scheduled-For)], in arrival order."""
        url = f"{self.base()}/_records" + ("?clear=1" if clear else "")
        with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 (http://127.0.0.x)
            return json.loads(response.read())


class Cluster:
    """Private PostgreSQL and Redis, the receiver, and the tree's scheduler and worker."""

    def __init__(self, workspace: Path, log_dir: Path, *, template: Path, code: Path, sizes: Sizes):
        self.code, self.sizes, self.log_dir = code, sizes, log_dir
        self.pg = PostgresServer(workspace / "pgdata").copy_from(template)
        self.redis = RedisServer(workspace / "redis")
        self.receiver = ProfileReceiver(log_dir, sizes.hosts + 1, sizes.profile)  # the last host: tenant A
        self.processes: list[ChimeProcess] = []
        self.commands = procfile(code)

    def env(self, process_type: str) -> dict[str, str]:
        env = chime_env(
            database_url=self.pg.url(DATABASE), redis_url=self.redis.url, process_type=process_type, code=self.code
        )
        env["PATH"] = f"{Path(PYTHON).parent}:{env.get('PATH', '/usr/bin:/bin')}"  # the Procfile's python, celery
        env["WORKER_CONCURRENCY"] = str(self.sizes.concurrency)
        return env

    def start(self) -> None:
        self.pg.start()
        self.redis.start()
        self.receiver.start()
        for kind, ready in (("worker", "ready."), ("scheduler", "scheduler started")):
            process = ChimeProcess(kind, ["bash", "-c", self.commands[kind]], self.env(kind), self.log_dir).start()
            process.wait_for_log(ready, timeout=120)
            self.processes.append(process)

    def connect(self):
        import psycopg

        return psycopg.connect(self.pg.dsn(DATABASE), autocommit=True)

    def describe_servers(self) -> dict[str, str]:
        """The private servers' versions and the settings that matter for speed (not the machine's)."""
        with self.connect() as conn:
            version = conn.execute("SHOW server_version").fetchone()[0]
            names = ("shared_buffers", "fsync", "synchronous_commit", "full_page_writes")
            settings = ", ".join(f"{n}={conn.execute(f'SHOW {n}').fetchone()[0]}" for n in names)
        import redis

        client = redis.Redis.from_url(self.redis.url)
        try:
            redis_version = client.info("server")["redis_version"]
        finally:
            client.close()
        return {"PostgreSQL (private)": version, "PostgreSQL settings": settings, "Redis (private)": redis_version}

    def crashed(self) -> dict[str, int]:
        return {p.name: p.popen.returncode for p in self.processes if not p.alive()}

    def reset(self) -> None:
        with self.connect() as conn:
            conn.execute("TRUNCATE jobs_runattempt, jobs_jobrun, jobs_jobdefinition CASCADE")
        self.receiver.records(clear=True)

    def load(self, groups: list[dict]) -> dict:
        env = self.env("manage")
        spec = json.dumps({"lead": self.sizes.lead, "groups": groups})
        result = subprocess.run(
            [PYTHON, str(LOADER)], input=spec, cwd=self.code, env=env, capture_output=True, text=True, timeout=180
        )
        if result.returncode != 0:
            raise RuntimeError(f"load failed:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}")
        return json.loads(result.stdout.strip().splitlines()[-1])

    def close(self) -> None:
        for process in reversed(self.processes):  # scheduler, then worker, then the receiver
            process.stop(timeout=30)
        self.receiver.stop(timeout=10)
        stop_all()
        self.redis.stop()
        self.pg.stop("immediate")
        (self.log_dir / "postgres.log").write_text(self.pg.log())


# --- phases -----------------------------------------------------------------------------------


def run_phase(cluster: Cluster, name: str, groups: list[dict]) -> dict:
    """Load the groups, wait until every run is terminal (or the deadline), collect rows and records."""
    cluster.reset()
    loaded = cluster.load(groups)
    fire_at, expected = loaded["fire_at"], sum(g["count"] for g in groups)
    deadline = fire_at + max(g.get("offset", 0) + g["count"] * g.get("step", 0) for g in groups)
    deadline += cluster.sizes.deadline
    complete = False
    with cluster.connect() as conn:
        while time.time() < deadline:
            runs, terminal = conn.execute(
                "SELECT count(*), count(*) FILTER (WHERE status = ANY(%s)) FROM jobs_jobrun", [list(TERMINAL)]
            ).fetchone()
            if runs >= expected and terminal >= runs:
                complete = True
                break
            if cluster.crashed():
                break
            time.sleep(0.25)
        rows = conn.execute(
            "SELECT id::text, tenant_id::text, status, extract(epoch FROM scheduled_for)::float8, "
            "extract(epoch FROM finished_at)::float8, attempt_count FROM jobs_jobrun"
        ).fetchall()
    records = cluster.receiver.records(clear=True)
    by_tenant = {tenant_id: slug for slug, tenant_id in loaded["tenants"].items()}
    return {
        "phase": name,
        "fire_at": fire_at,
        "expected": expected,
        "complete": complete,
        "waited": round(time.time() - fire_at, 1),
        "crashed": cluster.crashed(),
        "rows": [[run_id, by_tenant.get(t, t), *rest] for run_id, t, *rest in rows],
        "records": records,
    }


def throughput_groups(cluster: Cluster, path: str) -> list[dict]:
    s = cluster.sizes
    tenants = [f"iso-t{i:02d}" for i in range(s.tenants)]
    # Row k goes to tenant k % tenants, at host 1 + (k % tenants) % hosts: each tenant one host.
    urls = [f"{cluster.receiver.base(1 + i % s.hosts)}/{path}/k" for i in range(s.tenants)]
    return [{"name": path, "tenants": tenants, "urls": urls, "count": s.runs, "timeout_seconds": s.timeout_seconds}]


def isolation_groups(cluster: Cluster, *, with_slow: bool) -> list[dict]:
    s = cluster.sizes
    other = {
        "name": "b", "tenants": ["iso-b"], "urls": [f"{cluster.receiver.base(1)}/instant/b"],
        "count": s.other_runs, "offset": s.other_offset, "step": s.other_step, "timeout_seconds": s.timeout_seconds,
    }  # fmt: skip
    if not with_slow:
        return [other]
    slow_host = cluster.receiver.base(s.hosts + 1)
    slow = {
        "name": "a", "tenants": ["iso-a"], "urls": [f"{slow_host}/hold/{s.hold_seconds:g}/a"],
        "count": s.slow_runs, "timeout_seconds": s.slow_timeout,
    }  # fmt: skip
    return [slow, other]


async def _raw(url_for, n: int, in_flight: int, timeout: float, warm: str) -> tuple[float, list[float], int]:
    """n POSTs, `in_flight` at a time, after warming the pool on `warm` (an instant URL):
    (requests/s, latencies of the answered ones, how many timed out)."""
    import aiohttp

    latencies: list[float] = []
    timeouts = 0
    connector = aiohttp.TCPConnector(limit=in_flight)
    client_timeout = aiohttp.ClientTimeout(total=timeout)
    async with aiohttp.ClientSession(connector=connector, timeout=client_timeout) as session:
        semaphore = asyncio.Semaphore(in_flight)

        async def one(url: str) -> None:
            nonlocal timeouts
            async with semaphore:
                t0 = time.perf_counter()
                try:
                    async with session.post(url, data=b'{"bench":true}') as response:
                        await response.read()
                    latencies.append(time.perf_counter() - t0)
                except TimeoutError:
                    timeouts += 1

        await asyncio.gather(*(one(warm) for _ in range(in_flight)))  # open the connections first
        latencies.clear()
        start = time.perf_counter()
        await asyncio.gather(*(one(url_for(k)) for k in range(n)))
        return n / (time.perf_counter() - start), latencies, timeouts


def raw_ceiling(cluster: Cluster) -> float:
    s = cluster.sizes
    base = cluster.receiver.base(1)
    rate, _, _ = asyncio.run(_raw(lambda k: f"{base}/instant/raw", s.raw_requests, s.raw_in_flight, 30, base))
    return rate


def profile_check(cluster: Cluster) -> dict:
    """The realistic receiver seen from a client with the jobs' timeout: drawn vs measured latency."""
    s = cluster.sizes
    base = cluster.receiver.base(1)
    _, measured, timeouts = asyncio.run(
        _raw(lambda k: f"{base}/realistic/check-{k}", s.check_requests, s.check_in_flight, s.timeout_seconds, base)
    )
    drawn = [s.profile.latency(f"check-{k}") for k in range(s.check_requests)]
    return {
        "measured": measured,
        "timeouts": timeouts,
        "drawn": [d for d in drawn if d < s.timeout_seconds],
        "drawn_hanging": sum(1 for d in drawn if d >= s.timeout_seconds),
    }


def run_round(cluster: Cluster, number: int, log) -> dict:
    out: dict = {"round": number}
    log(f"round {number}: raw ceiling")
    out["raw"] = raw_ceiling(cluster)
    out["check"] = profile_check(cluster)
    for name, path in (("instant", "instant"), ("realistic", "realistic")):
        log(f"round {number}: {name} ({cluster.sizes.runs:,} runs due at once)")
        out[name] = run_phase(cluster, name, throughput_groups(cluster, path))
    for name, with_slow in (("alone", False), ("beside-slow", True)):
        log(f"round {number}: other tenant {name}")
        out[name] = run_phase(cluster, name, isolation_groups(cluster, with_slow=with_slow))
    return out


def run(sizes: Sizes, *, code: Path = ROOT, log_dir: Path | None = None, log=print) -> dict:
    """Build the tree's template database, start the cluster, run every round; the raw results."""
    code = code.resolve()
    log_dir = log_dir or ROOT / "bench" / "results" / "logs" / "isolation"
    log_dir.mkdir(parents=True, exist_ok=True)
    for old in log_dir.glob("*"):
        if old.is_file():
            old.unlink()
    workspace = make_workspace()
    result = {
        "sizes": asdict(sizes), "profile": sizes.profile.describe(), "code": str(code),
        "revision": revision(code), "worker_command": procfile(code).get("worker", ""), "rounds": [],
    }  # fmt: skip
    cluster = None
    try:
        log(f"migrating a template database with {code}")
        template = build_template(workspace, log_dir, code)
        cluster = Cluster(workspace, log_dir, template=template, code=code, sizes=sizes)
        cluster.start()
        result["servers"] = cluster.describe_servers()
        result["started_at"] = datetime.now().astimezone().isoformat(timespec="seconds")
        result["load_average"] = [load_average()]
        for number in range(1, sizes.rounds + 1):
            result["rounds"].append(run_round(cluster, number, log))
        result["load_average"].append(load_average())
        result["crashed"] = cluster.crashed()
    finally:
        if cluster is not None:
            cluster.close()
        stop_all()
        remove_workspace(workspace)
    return result
