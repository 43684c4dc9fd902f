"""Private PostgreSQL and Redis servers the fault suite may kill and restart.

They listen on 127.0.0.1 on ports picked below the kernel's ephemeral range (so no client socket
can grab a port while its server is down for a restart), never 5432 or 6379, and live in a
temporary directory under /tmp that is removed when they stop. PostgreSQL's binaries refuse to run
as root, so when this runs as root they run as the `postgres` user (`runuser`) in directories it
owns. A workspace records the pid of the process that made it: a later run removes workspaces
(and stops their servers) whose owner died without cleaning up, e.g. after a SIGKILL.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path


def _pg_bin() -> Path:
    """CHIME_CHAOS_PG_BIN, else PostgreSQL 15's Debian path, else the newest installed version's."""
    if os.environ.get("CHIME_CHAOS_PG_BIN"):
        return Path(os.environ["CHIME_CHAOS_PG_BIN"])
    preferred = Path("/usr/lib/postgresql/15/bin")
    if preferred.exists():
        return preferred
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0
    )
    return found[-1] if found else preferred


PG_BIN = _pg_bin()
REDIS_SERVER = os.environ.get("CHIME_CHAOS_REDIS_SERVER", "redis-server")
WORKSPACE_PREFIX = "chime-chaos-"
RESERVED_PORTS = {5432, 6379}  # the machine's own servers: never touched


class ServerError(RuntimeError):
    """A private server could not be started or stopped; the message says which and why."""


def missing_binaries() -> list[str]:
    """What this machine lacks to run the fault suite (empty when it can)."""
    missing = [str(PG_BIN / name) for name in ("initdb", "pg_ctl", "postgres") if not (PG_BIN / name).exists()]
    if not shutil.which(REDIS_SERVER):
        missing.append(REDIS_SERVER)
    if os.geteuid() == 0 and not shutil.which("runuser"):
        missing.append("runuser")
    return missing


PORT_LOCK_DIR = Path(tempfile.gettempdir()) / "chime-ports"
# Ports this process picked, each with its lock file held open (fcntl.flock) for the life of the
# process: a server keeps its port across restarts, and another picker must not take it meanwhile.
_reserved: dict[int, int] = {}


def _reserve(port: int) -> bool:
    """Claim `port` for this process, across processes: an exclusive flock on its file in
    PORT_LOCK_DIR, released by the kernel when this process ends (however it ends)."""
    PORT_LOCK_DIR.mkdir(mode=0o777, exist_ok=True)
    fd = os.open(PORT_LOCK_DIR / str(port), os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    _reserved[port] = fd
    return True


def free_port() -> int:
    """A free TCP port on 127.0.0.1 in 20000-29999 (below the ephemeral range, see the module doc),
    reserved for this process. A bind test alone left a window between the pick and the server's
    start: two pickers (the three servers of one scenario, or the two shards of `./chime test`)
    could both find a port free, and the second server to start failed with "Address already in
    use" (CI, tests/chaos). A port is handed out only once it is reserved and then still binds, so
    pickers that reserve never share one; a foreign process can only have taken it before."""
    for _ in range(200):
        port = random.randint(20000, 29999)
        if port in RESERVED_PORTS or port in _reserved or not _reserve(port):
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue  # a foreign listener: stays reserved here, so no one picks it again
            return port
    raise ServerError("no free port found in 20000-29999")


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


try:  # loaded here, not in the forked child: a child only calls the bound function
    _PRCTL = ctypes.CDLL("libc.so.6", use_errno=True).prctl
except (OSError, AttributeError):
    _PRCTL = None
PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """preexec_fn: SIGKILL this child when the harness dies, even by SIGKILL (Linux prctl), so a
    killed harness leaves no Chime process or Redis behind (PostgreSQL daemonizes: see
    reap_stale_workspaces)."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGKILL)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# --- workspace ------------------------------------------------------------------------------


def _pg_user() -> str | None:
    """The user PostgreSQL runs as: `postgres` when we are root, else ourselves (None)."""
    return "postgres" if os.geteuid() == 0 else None


def _as_pg_user(args: list[str]) -> list[str]:
    user = _pg_user()
    return ["runuser", "-u", user, "--", *args] if user else args


def make_workspace() -> Path:
    """A fresh /tmp/chime-chaos-* directory that PostgreSQL's user can enter."""
    reap_stale_workspaces()
    root = Path(tempfile.mkdtemp(prefix=WORKSPACE_PREFIX))
    root.chmod(0o755)
    (root / "owner.pid").write_text(str(os.getpid()))
    return root


def pg_owned_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    user = _pg_user()
    if user:
        shutil.chown(path, user=user, group=user)
    path.chmod(0o700)
    return path


def remove_workspace(root: Path) -> None:
    """Stop whatever servers still run from `root`, then delete it."""
    for pidfile in root.rglob("postmaster.pid"):
        _stop_postmaster(pidfile.parent)
    for pidfile in root.rglob("redis.pid"):
        with contextlib.suppress(ValueError, OSError):
            os.kill(int(pidfile.read_text().split()[0]), signal.SIGKILL)
    shutil.rmtree(root, ignore_errors=True)


def reap_stale_workspaces() -> None:
    """Remove workspaces left by a run that died without cleaning up (its owner pid is gone)."""
    for root in Path(tempfile.gettempdir()).glob(WORKSPACE_PREFIX + "*"):
        try:
            owner = int((root / "owner.pid").read_text())
        except (OSError, ValueError):
            owner = None
        if owner is None or not _pid_alive(owner):
            remove_workspace(root)


def _stop_postmaster(datadir: Path) -> None:
    pidfile = datadir / "postmaster.pid"
    if not pidfile.exists():
        return
    subprocess.run(
        _as_pg_user([str(PG_BIN / "pg_ctl"), "-D", str(datadir), "-m", "immediate", "-w", "-t", "20", "stop"]),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    with contextlib.suppress(OSError, ValueError, IndexError):
        pid = int(pidfile.read_text().split()[0])
        os.kill(pid, signal.SIGKILL)


# --- PostgreSQL -----------------------------------------------------------------------------


class PostgresServer:
    """One PostgreSQL 15 cluster in `datadir`, managed with pg_ctl (so `pg_ctl restart` is the real
    operator's command). fsync is off: a restart, not a power cut, is what is simulated."""

    def __init__(self, datadir: Path, port: int | None = None):
        self.datadir = datadir
        self.port = port or free_port()
        self.log_path = datadir.parent / f"{datadir.name}.log"

    def _pg(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        result = subprocess.run(
            _as_pg_user([str(PG_BIN / args[0]), *args[1:]]),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if result.returncode != 0:
            raise ServerError(f"{' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
        return result

    def initdb(self) -> PostgresServer:
        pg_owned_dir(self.datadir.parent / "pg")  # socket directory
        pg_owned_dir(self.datadir)
        self._pg("initdb", "-D", str(self.datadir), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C")
        return self

    def copy_from(self, template: Path) -> PostgresServer:
        """A clone of a stopped, migrated cluster: much cheaper than initdb + migrate per scenario."""
        pg_owned_dir(self.datadir.parent / "pg")
        subprocess.run(["cp", "-a", str(template), str(self.datadir)], check=True)
        return self

    def _options(self) -> str:
        socket_dir = self.datadir.parent / "pg"
        return (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={socket_dir} "
            "-c fsync=off -c full_page_writes=off -c max_connections=100"
        )

    def start(self) -> PostgresServer:
        self._touch_log()
        log, opts = str(self.log_path), self._options()
        self._pg("pg_ctl", "-D", str(self.datadir), "-l", log, "-o", opts, "-w", "-t", "60", "start")
        return self

    def restart(self, mode: str) -> None:
        """`pg_ctl restart -m fast|immediate`: the command-line options are kept (postmaster.opts)."""
        self._pg("pg_ctl", "-D", str(self.datadir), "-l", str(self.log_path), "-m", mode, "-w", "-t", "60", "restart")

    def stop(self, mode: str = "fast") -> None:
        if (self.datadir / "postmaster.pid").exists():
            try:
                self._pg("pg_ctl", "-D", str(self.datadir), "-m", mode, "-w", "-t", "30", "stop", timeout=40)
            except (ServerError, subprocess.TimeoutExpired):
                _stop_postmaster(self.datadir)

    def _touch_log(self) -> None:
        if not self.log_path.exists():
            self.log_path.touch()
            user = _pg_user()
            if user:
                shutil.chown(self.log_path, user=user, group=user)

    def url(self, database: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def dsn(self, database: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={database} connect_timeout=3"

    def create_database(self, name: str) -> None:
        import psycopg

        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


# --- Redis ----------------------------------------------------------------------------------


class RedisServer:
    """redis-server in its own process group. No RDB snapshots; AOF only with appendonly=True."""

    def __init__(self, workdir: Path, *, appendonly: bool = False, port: int | None = None):
        self.workdir = workdir
        self.appendonly = appendonly
        self.port = port or free_port()
        self.popen: subprocess.Popen | None = None
        self.log_path = workdir / "redis.log"
        workdir.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 20) -> RedisServer:
        args = [
            REDIS_SERVER,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            "--dir", str(self.workdir),
            "--pidfile", str(self.workdir / "redis.pid"),
            "--logfile", str(self.log_path),
        ]  # fmt: skip
        self.popen = subprocess.Popen(
            args,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise ServerError(f"redis-server exited with {self.popen.returncode}:\n{self.log()[-2000:]}")
            if self.ping():
                return self
            time.sleep(0.05)
        raise ServerError(f"redis-server on port {self.port} not ready within {timeout}s")

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Kill the server (SIGKILL: nothing is flushed that was not written already)."""
        if self.popen and self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, sig)
            self.popen.wait(10)
        (self.workdir / "redis.pid").unlink(missing_ok=True)

    def stop(self) -> None:
        self.kill(signal.SIGKILL)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
