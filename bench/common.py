"""Shared bits of the benchmarks: environment, database setup, real processes, bulk loads, stats.

Every bench uses its own PostgreSQL database (`chime_bench`) and Redis DB 14, so it never touches
the test suite's `test_chime` / DB 15. Processes are started in their own session (process group)
and always stopped with SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
import zlib
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "bench" / "results"
LOGS = RESULTS / "logs"
PYTHON = sys.executable

# One bench at a time per checkout; CHIME_BENCH_DB / CHIME_BENCH_REDIS_URL let two checkouts (git
# worktrees) bench side by side without sharing a database or a Redis DB.
BENCH_DB = os.environ.get("CHIME_BENCH_DB", "chime_bench")
# CHIME_BENCH_PG_PORT points the benches at another PostgreSQL on 127.0.0.1 (trust auth), e.g. a
# private server started with pg_stat_statements to see which statements the database's CPU goes to.
PG_PORT = int(os.environ.get("CHIME_BENCH_PG_PORT", "5432"))
PG_ADMIN_DSN = f"postgresql://postgres@127.0.0.1:{PG_PORT}/postgres"
BENCH_DSN = f"postgresql://postgres@127.0.0.1:{PG_PORT}/{BENCH_DB}"
DATABASE_URL = f"postgres://postgres@127.0.0.1:{PG_PORT}/{BENCH_DB}"
REDIS_URL = os.environ.get("CHIME_BENCH_REDIS_URL", "redis://127.0.0.1:6379/14")
PARTITIONS = 64  # settings.CHIME_PARTITIONS default; checked against settings in load_definitions

BASE_ENV = {
    "DJANGO_SETTINGS_MODULE": "config.settings.base",
    "DATABASE_URL": DATABASE_URL,
    "SECRET_KEY": "bench",
    "REDIS_URL": REDIS_URL,
    "WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true",
    "PYTHONUNBUFFERED": "1",
    "LOG_LEVEL": "INFO",
}


def bench_env(settings_module: str = "config.settings.base", **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(BASE_ENV)
    env["DJANGO_SETTINGS_MODULE"] = settings_module
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


_django_ready = False


def setup_django(settings_module: str = "config.settings.base") -> None:
    """Configure this process like the Chime processes (same env), then django.setup()."""
    global _django_ready
    if _django_ready:
        return
    for key, value in BASE_ENV.items():
        os.environ[key] = value
    os.environ["DJANGO_SETTINGS_MODULE"] = settings_module
    import django

    django.setup()
    _django_ready = True


# --- database and Redis ---------------------------------------------------------------------


def pg_connect(dsn: str = BENCH_DSN, autocommit: bool = True):
    import psycopg

    return psycopg.connect(dsn, autocommit=autocommit)


def ensure_database(settings_module: str = "config.settings.base") -> None:
    """Create chime_bench if missing and migrate it (idempotent, quick when up to date)."""
    with pg_connect(PG_ADMIN_DSN) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [BENCH_DB]).fetchone():
            conn.execute(f'CREATE DATABASE "{BENCH_DB}"')
    subprocess.run(
        [PYTHON, "manage.py", "migrate", "--noinput", "-v", "0", "--skip-checks"],
        cwd=ROOT,
        env=bench_env(settings_module),
        check=True,
    )


def redis_client():
    import redis

    return redis.Redis.from_url(REDIS_URL)


def reset_state() -> None:
    """Empty the job tables and Redis DB 14 (tenants stay)."""
    with pg_connect() as conn:
        conn.execute("TRUNCATE jobs_runattempt, jobs_jobrun, jobs_jobdefinition")
    redis_client().flushdb()


def bench_tenant(slug: str = "bench"):
    """A bench tenant with a signing secret, created through the service on first use."""
    setup_django()
    from apps.tenants.selectors import signing_secrets_valid, tenant_by_slug
    from apps.tenants.services import tenant_create

    tenant = tenant_by_slug(slug) or tenant_create(slug=slug, name=f"Benchmarks {slug}")
    assert signing_secrets_valid(tenant=tenant), f"{slug} tenant has no signing secret"
    return tenant


def bench_tenants(count: int) -> list:
    """`count` tenants: `bench` first, then bench-001, bench-002, ..."""
    return [bench_tenant("bench" if i == 0 else f"bench-{i:03d}") for i in range(count)]


# --- bulk load ------------------------------------------------------------------------------

VARIABLE_COLUMNS = ("id", "tenant_id", "name", "run_at", "next_fire_at", "partition")


def uuid7_bytes(count: int, start_ms: int | None = None) -> Iterator[bytes]:
    """UUIDv7 ids (RFC 9562 layout), increasing like the app's apps.core.ids.uuid7(), cheaper to make in bulk.

    48-bit millisecond timestamp, version 7, a 12-bit counter as rand_a, variant 10, random rand_b.
    """
    ms = start_ms if start_ms is not None else int(time.time() * 1000)
    randomness = os.urandom(8 * count)
    for k in range(count):
        head = ((ms + (k >> 12)) << 16) | 0x7000 | (k & 0x0FFF)
        tail = bytearray(randomness[8 * k : 8 * k + 8])
        tail[0] = 0x80 | (tail[0] & 0x3F)
        yield head.to_bytes(8, "big") + bytes(tail)


def partition_of(id_bytes: bytes) -> int:
    """Same formula as apps.jobs.models.partition_for (verified on a sample after each load)."""
    return zlib.crc32(id_bytes) % PARTITIONS


def copy_text_time(value: datetime) -> str:
    return value.astimezone(UTC).isoformat()


def definition_template(*, tenant, target_url: str) -> tuple[list[str], str]:
    """One `once` definition made by the app's own job_create(), read back in COPY text format.

    Returns (the other columns, their COPY text joined by tabs): every column the bench does not
    vary per row keeps exactly what the service and the model defaults put there, so new NOT NULL
    columns added by a migration are filled without changing the bench.
    """
    setup_django()
    from psycopg import sql

    from apps.jobs.services import job_create

    run_at = datetime.now(UTC) + timedelta(days=3650)
    definition = job_create(
        tenant=tenant,
        name="bench-template",
        schedule_type="once",
        run_at=run_at,
        target_url=target_url,
        target_body={"bench": True},
    )
    assert definition.next_fire_at == run_at, "a once job's next_fire_at is no longer its run_at"
    with pg_connect() as conn, conn.cursor() as cur:
        columns = [
            row[0]
            for row in cur.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = 'jobs_jobdefinition'::regclass "
                "AND attnum > 0 AND NOT attisdropped ORDER BY attnum"
            ).fetchall()
        ]
        query = sql.SQL("COPY (SELECT * FROM jobs_jobdefinition WHERE id = {}) TO STDOUT").format(
            sql.Literal(str(definition.id))
        )
        with cur.copy(query) as copy:
            line = b"".join(bytes(chunk) for chunk in copy).decode().rstrip("\n")
        cur.execute("DELETE FROM jobs_jobdefinition WHERE id = %s", [definition.id])
    values = dict(zip(columns, line.split("\t"), strict=True))
    others = [c for c in columns if c not in VARIABLE_COLUMNS]
    return others, "\t".join(values[c] for c in others)


def copy_definitions(
    *,
    tenant,
    target_url: str,
    tenants: list | None = None,
    fire_texts: Iterable[str],
    count: int,
    name_prefix: str = "bench",
    chunk_rows: int = 50_000,
    skip_fk_checks: bool = False,
) -> float:
    """COPY `count` active `once` definitions; the k-th is due at the k-th of `fire_texts`
    (timestamps as COPY text, e.g. copy_text_time(dt)): run_at = next_fire_at = that time.

    id = UUIDv7, partition = crc32(id bytes) % 64 like partition_for(); row k belongs to
    tenants[k % len(tenants)] (default: just `tenant`); every other column as job_create() fills it
    (see definition_template). Returns the seconds the COPY took.
    """
    others, constant = definition_template(tenant=tenant, target_url=target_url)
    tenant_ids = [str(t.id) for t in (tenants or [tenant])]
    spread = len(tenant_ids)
    columns = ", ".join(f'"{c}"' for c in (*VARIABLE_COLUMNS, *others))
    t0 = time.perf_counter()
    with pg_connect(autocommit=False) as conn, conn.cursor() as cur:
        if skip_fk_checks:
            # Every row points at an existing bench tenant: skip the per-row FK trigger.
            cur.execute("SET session_replication_role = replica")
        with cur.copy(f"COPY jobs_jobdefinition ({columns}) FROM STDIN") as copy:
            buf = io.StringIO()
            rows = 0
            for k, (id_bytes, fire) in enumerate(zip(uuid7_bytes(count), fire_texts, strict=False)):
                buf.write(
                    f"{id_bytes.hex()}\t{tenant_ids[k % spread]}\t{name_prefix}-{k}\t{fire}\t{fire}\t"
                    f"{partition_of(id_bytes)}\t{constant}\n"
                )
                rows += 1
                if rows == chunk_rows:
                    copy.write(buf.getvalue())
                    buf = io.StringIO()
                    rows = 0
            if rows:
                copy.write(buf.getvalue())
        conn.commit()
    elapsed = time.perf_counter() - t0
    verify_partitions()
    return elapsed


def load_once_definitions(
    *, tenant, fire_times: Iterable[datetime], count: int, target_url: str, tenants: list | None = None
) -> float:
    """copy_definitions() for datetimes (consecutive equal datetimes are formatted once)."""

    def texts():
        last, text = None, ""
        for fire in fire_times:
            if fire != last:
                last, text = fire, copy_text_time(fire)
            yield text

    return copy_definitions(tenant=tenant, tenants=tenants, target_url=target_url, fire_texts=texts(), count=count)


def verify_partitions(sample: int = 1000) -> None:
    """Check the loaded `partition` values against the app's own partition_for()."""
    setup_django()
    from django.conf import settings

    from apps.jobs.models import partition_for

    assert settings.CHIME_PARTITIONS == PARTITIONS, "bench assumes CHIME_PARTITIONS=64"
    with pg_connect() as conn:
        rows = conn.execute(
            "SELECT id, partition FROM jobs_jobdefinition TABLESAMPLE SYSTEM (1) LIMIT %s", [sample]
        ).fetchall()
        if not rows:
            rows = conn.execute("SELECT id, partition FROM jobs_jobdefinition LIMIT %s", [sample]).fetchall()
    bad = [(i, p) for i, p in rows if partition_for(i) != p]
    assert not bad, f"partition mismatch for {len(bad)} of {len(rows)} sampled rows: {bad[:3]}"


# --- processes ------------------------------------------------------------------------------


class Process:
    """A real process in its own process group; stop() = SIGTERM to the group, then SIGKILL."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], cwd: Path | None = None):
        LOGS.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.log_path = LOGS / f"{name}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 (closed in stop)
        self.popen = subprocess.Popen(
            args, cwd=cwd or ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )
        _STARTED.append(self)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, text: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.log():
                return
            if self.popen.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.popen.returncode}:\n{self.log()[-3000:]}")
            time.sleep(0.1)
        raise TimeoutError(f"{self.name} did not log {text!r} within {timeout}s:\n{self.log()[-3000:]}")

    def group_pids(self) -> list[int]:
        """The process and every process of its group (a Celery worker's pool children)."""
        pids = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError, IndexError, ValueError):
                    stat = (entry / "stat").read_text()
                    fields = stat[stat.rindex(")") + 2 :].split()
                    if int(fields[2]) == self.popen.pid:  # pgrp
                        pids.append(int(entry.name))
        return pids

    def stop(self, timeout: float = 15) -> None:
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(5)
        # Pool children left behind by a dead parent are in the same group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        if not self._log.closed:
            self._log.close()
        if self in _STARTED:
            _STARTED.remove(self)


_STARTED: list[Process] = []


def stop_all() -> None:
    for process in reversed(list(_STARTED)):
        process.stop()


@contextlib.contextmanager
def processes() -> Iterator[None]:
    """Stop every process started inside, whatever happens (also on SIGTERM/SIGINT of the bench)."""

    def on_signal(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, on_signal)
    try:
        yield
    finally:
        stop_all()
        signal.signal(signal.SIGTERM, previous)


def start_scheduler(name: str, *args: str, **env: str) -> Process:
    process = Process(name, [PYTHON, "manage.py", "run_scheduler", "--skip-checks", *args], bench_env(**env))
    process.wait_for_log("scheduler started", timeout=60)
    return process


def start_worker(name: str = "worker", concurrency: int = 2, **env: str) -> Process:
    args = [
        PYTHON,
        "-m",
        "celery",
        "-A",
        "config",
        "worker",
        "-Q",
        "runs.high,runs.default,runs.low",
        "--pool",
        "prefork",
        "--concurrency",
        str(concurrency),
        "--loglevel",
        "WARNING",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        "-n",
        f"{name}@%h",
    ]
    # `python -m celery` is not recognised as a worker by config/process.py (argv[0] is celery's
    # __main__.py): say so, as the Procfile's `celery` does, so it gets the worker's pool size
    # and its backends the application_name `chime-worker` the bench's CPU meter looks for.
    env = {"CHIME_PROCESS_TYPE": "worker", **env}
    process = Process(name, args, bench_env(**env))
    wait_for(lambda: len(process.group_pids()) >= concurrency + 1 and _worker_ready(process), 60, "worker ready")
    return process


def _worker_ready(process: Process) -> bool:
    if process.popen.poll() is not None:
        raise RuntimeError(f"worker exited:\n{process.log()[-3000:]}")
    # At WARNING level Celery prints nothing when ready; ask it over the broker instead.
    from celery import Celery

    app = Celery(broker=REDIS_URL)
    try:
        replies = app.control.ping(timeout=0.5)
    finally:
        app.close()
    return bool(replies)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ReceiverProcess(Process):
    """bench/receiver.py in its own process; records arrival time and headers of each request."""

    def __init__(self, name: str = "receiver", hosts: int = 1):
        self.port = free_port()
        self.hosts = hosts  # listens on 127.0.0.1 .. 127.0.0.<hosts>
        self.dump_path = LOGS / f"{name}-deliveries.jsonl"
        self.dump_path.unlink(missing_ok=True)
        super().__init__(
            name,
            [
                PYTHON,
                "-m",
                "bench.receiver",
                "--port",
                str(self.port),
                "--dump",
                str(self.dump_path),
                "--hosts",
                str(hosts),
            ],
            bench_env(),
        )
        wait_for(self._up, 30, "receiver up")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def _up(self) -> bool:
        if self.popen.poll() is not None:
            raise RuntimeError(f"receiver exited:\n{self.log()[-3000:]}")
        with contextlib.suppress(OSError):
            return self.count() >= 0
        return False

    def count(self) -> int:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/_count", timeout=5) as response:
            return int(json.loads(response.read())["count"])

    def deliveries(self) -> list[tuple[float, str, str]]:
        """Stop the receiver (it dumps on SIGTERM) and read (arrival, webhook-id, scheduled-for)."""
        self.stop()
        with open(self.dump_path) as fh:
            return [tuple(json.loads(line)) for line in fh if line.strip()]


def wait_for(condition, timeout: float, message: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"{message} not met within {timeout}s")


def cpu_seconds(pids: Iterable[int]) -> float:
    """CPU seconds of the given live processes, including their exited and reaped children
    (utime + stime + cutime + cstime), so a PostgreSQL backend or pool child that exits in the
    middle of a measurement is still counted (through its parent: the postmaster, the worker)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{pid}/stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            total += int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])
    return total / tick


def pids_named(prefix: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if (entry / "comm").read_text().strip().startswith(prefix):
                    pids.append(int(entry.name))
    return pids


def pids_of_database(dbname: str = BENCH_DB) -> list[int]:
    """PostgreSQL backends serving one database (their title is `postgres: ... USER DB HOST ...`).

    On a machine shared with other databases (other worktrees' tests), `pids_named("postgres")`
    counts their backends too; this counts only the bench's own. A backend that exits before the
    meter stops is missed (the worker and scheduler keep theirs in a pool), and the shared
    walwriter/checkpointer are not included: the all-backends figure is the upper bound."""
    pids = []
    needle = f" {dbname} "
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                title = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                if needle in title and (entry / "comm").read_text().startswith("postgres"):
                    pids.append(int(entry.name))
    return pids


def backends_of(application_prefix: str, dbname: str = BENCH_DB):
    """A pids function for SampledCpu: the backends of one database whose application_name starts
    with the prefix (`chime-worker`, `chime-scheduler`: config/settings/base.py sets it per process
    type), asked from pg_stat_activity over a connection to another database (not counted)."""
    state = {}

    def pids() -> list[int]:
        if "conn" not in state:
            state["conn"] = pg_connect(PG_ADMIN_DSN)
        rows = (
            state["conn"]
            .execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s AND application_name LIKE %s",
                [dbname, application_prefix + "%"],
            )
            .fetchall()
        )
        return [row[0] for row in rows]

    return pids


def proc_status_kb(pid: int, field: str = "VmRSS") -> int | None:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return None


class CpuMeter:
    """CPU seconds used by named groups of processes between start() and stop()."""

    def __init__(self, groups: dict[str, callable]):
        self.groups = groups  # name -> function returning the pids now
        self.before: dict[str, float] = {}
        self.used: dict[str, float] = {}
        self.wall = 0.0

    def start(self) -> None:
        for get in self.groups.values():
            if isinstance(get, SampledCpu):
                get.start()
        self.before = {name: cpu_seconds(get()) for name, get in self.groups.items() if not isinstance(get, SampledCpu)}
        self._t0 = time.monotonic()

    def stop(self) -> dict[str, float]:
        self.wall = time.monotonic() - self._t0
        self.used = {
            name: get.stop() if isinstance(get, SampledCpu) else cpu_seconds(get()) - self.before[name]
            for name, get in self.groups.items()
        }
        return self.used


class SampledCpu:
    """CPU seconds of a changing set of processes whose parent is not ours (PostgreSQL backends of
    one database): polled every `interval` seconds in a thread, each pid's last reading kept, so a
    backend that exits mid-measurement is counted up to its last sample (at most `interval` lost)."""

    def __init__(self, pids: callable, interval: float = 0.25):
        self.pids, self.interval = pids, interval
        self._base: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._stop = None

    def _sample(self, first: bool = False) -> None:
        for pid in self.pids():
            value = cpu_seconds([pid])
            if first:
                self._base[pid] = value
            self._last[pid] = value

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def start(self) -> None:
        import threading

        self._base, self._last = {}, {}
        self._sample(first=True)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        self._sample()
        return sum(v - self._base.get(pid, 0.0) for pid, v in self._last.items())


class BackendCpu:
    """CPU seconds of the PostgreSQL backends serving the bench database only (not the other
    databases of a shared server, nor the server's background processes): the backends' pids
    come from pg_stat_activity, and each one's last reading is kept, so a backend that exits
    between two samples still counts up to its last sample. Call sample() often (every poll)."""

    def __init__(self, conn, exclude=()):
        self.conn = conn  # an autocommit psycopg connection to the bench database (excluded)
        self.exclude = set(exclude)  # other backends of the bench's own (its polling connection)
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}

    def _pids(self) -> list[int]:
        rows = self.conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
        return [pid for (pid,) in rows if pid not in self.exclude]

    def sample(self) -> None:
        for pid in self._pids():
            self.first.setdefault(pid, 0.0)  # born after start(): all its CPU is in the window
            self.last[pid] = max(self.last.get(pid, 0.0), cpu_seconds([pid]))  # 0 once it has exited

    def start(self) -> None:
        self.first, self.last = {}, {}
        for pid in self._pids():
            self.first[pid] = self.last[pid] = cpu_seconds([pid])

    def used(self) -> float:
        """Seconds since start(); a backend that appeared later counts from 0 (its whole life)."""
        return sum(self.last[pid] - self.first.get(pid, 0.0) for pid in self.last)


# --- stats and output -----------------------------------------------------------------------


def percentiles(values: list[float], points=(50, 95, 99)) -> dict[str, float | None]:
    out: dict[str, float | None] = {f"p{p}": None for p in points}
    out["max"] = max(values) if values else None
    if len(values) >= 2:
        cuts = statistics.quantiles(values, n=100, method="inclusive")
        for p in points:
            out[f"p{p}"] = cuts[p - 1]
    elif values:
        for p in points:
            out[f"p{p}"] = values[0]
    return out


def median(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(value, unit: str = "", digits: int = 2) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.{digits}f}{unit}"
    if isinstance(value, int):
        return f"{value:,}{unit}"
    return f"{value}{unit}"


def table(headers: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


class Report:
    """Collects markdown; prints it and appends it to --md FILE."""

    def __init__(self, title: str, md_path: str | None):
        self.parts = [f"## {title}\n"]
        self.md_path = md_path

    def add(self, text: str = "") -> None:
        self.parts.append(text)
        print(text, flush=True)

    def save(self) -> None:
        if self.md_path:
            with open(self.md_path, "a") as fh:
                fh.write("\n".join(self.parts) + "\n\n")


def log(message: str) -> None:
    print(f"[{datetime.now().strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


_LOCK_FILE = None


def acquire_bench_lock() -> None:
    """One bench at a time on this machine: they share chime_bench, Redis DB 14 and the cores."""
    global _LOCK_FILE
    import fcntl

    RESULTS.mkdir(parents=True, exist_ok=True)
    _LOCK_FILE = open(RESULTS / ".lock", "w")  # noqa: SIM115 (held until the process exits)
    try:
        fcntl.flock(_LOCK_FILE, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise SystemExit("another bench is running on this machine (bench/results/.lock); try again later") from None


class BenchParser(argparse.ArgumentParser):
    def parse_args(self, *args, **kwargs):
        parsed = super().parse_args(*args, **kwargs)
        acquire_bench_lock()
        return parsed


def base_parser(description: str) -> argparse.ArgumentParser:
    parser = BenchParser(description=description)
    parser.add_argument("--quick", action="store_true", help="smaller sizes for a fast run")
    parser.add_argument("--md", metavar="FILE", help="append the markdown results to FILE")
    parser.add_argument("--no-setup", action="store_true", help="skip creating/migrating chime_bench")
    return parser


def machine_info() -> dict[str, str]:
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = "unknown"
    with contextlib.suppress(OSError):
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f"{kb / 1024 / 1024:.1f} GiB"
    info = {
        "nproc": str(os.cpu_count()),
        "CPU": cpu,
        "memory": mem,
        "kernel": platform.release(),
        "Python": platform.python_version(),
    }
    with contextlib.suppress(Exception), pg_connect(PG_ADMIN_DSN) as conn:
        info["PostgreSQL"] = conn.execute("SHOW server_version").fetchone()[0]
        settings = []
        for name in ("shared_buffers", "synchronous_commit", "max_connections"):
            settings.append(f"{name}={conn.execute(f'SHOW {name}').fetchone()[0]}")
        info["PostgreSQL settings"] = ", ".join(settings)
    with contextlib.suppress(Exception):
        info["Redis"] = redis_client().info("server")["redis_version"]
    with contextlib.suppress(Exception):
        import celery
        import django

        info["Django / Celery"] = f"{django.get_version()} / {celery.__version__}"
    return info


def utcnow() -> datetime:
    return datetime.now(UTC)


def seconds(delta: timedelta) -> float:
    return delta.total_seconds()
