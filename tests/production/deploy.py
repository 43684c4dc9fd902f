"""A Procfile deploy on this machine, for the production smoke test: a fresh checkout, its own
database, and the Procfile's processes started exactly as a PaaS starts them (`sh -c <line>` with
$PORT set), with no DJANGO_SETTINGS_MODULE: whatever settings a deploy gets, these get.

Each process type runs in its own copy of the checkout, like a dyno: `release` in one that is
thrown away afterwards, the others in another, so nothing the release phase leaves on disk (static
files, say) can make the web process work by accident.
"""

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from django.conf import settings

from tests.support.processes import OUTPUT, ROOT

# The deploy's interpreter and tools: CHIME_DEPLOY_VENV, a virtualenv of requirements/base.txt
# alone as a deploy installs it (`./chime test` makes `.venv-deploy`), so that a runtime import of
# a package only the tests install fails here; else this suite's own virtualenv, which CI refuses.
DEPLOY_VENV = os.environ.get("CHIME_DEPLOY_VENV")
if not DEPLOY_VENV and os.environ.get("CI") == "true":
    raise RuntimeError("CI deploys from a virtualenv of base.txt: set CHIME_DEPLOY_VENV (./chime test does)")
VENV_BIN = Path(DEPLOY_VENV) / "bin" if DEPLOY_VENV else Path(sys.executable).parent


def procfile(path: Path = ROOT / "Procfile") -> dict[str, str]:
    """{process type: command line}, as Heroku and honcho read a Procfile."""
    processes = {}
    for line in path.read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, _, command = line.partition(":")
        processes[name.strip()] = command.strip()
    return processes


def fresh_checkout(into: Path) -> Path:
    """The working tree as `git clone` of it would give it: tracked and new files, nothing ignored
    (no staticfiles/, var/, .env, .venv)."""
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.split(b"\0")
    for name in filter(None, files):
        source = ROOT / os.fsdecode(name)
        if source.is_file():  # a file deleted in the working tree is still listed as cached
            target = into / os.fsdecode(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return into


# --- the database server the tests use --------------------------------------------------------


def server_conninfo(dbname: str = "postgres") -> dict:
    db = settings.DATABASES["default"]
    return {
        "host": db.get("HOST") or "127.0.0.1",
        "port": int(db.get("PORT") or 5432),
        "user": db.get("USER") or "postgres",
        "password": db.get("PASSWORD") or None,
        "dbname": dbname,
        "application_name": "chime-smoke-test",
    }


def database_url(dbname: str) -> str:
    info = server_conninfo(dbname)
    password = f":{info['password']}" if info["password"] else ""
    return f"postgres://{info['user']}{password}@{info['host']}:{info['port']}/{dbname}"


def create_database() -> str:
    name = f"chime_smoke_{secrets.token_hex(4)}"
    with psycopg.connect(**server_conninfo(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return name


def drop_database(name: str) -> None:
    with psycopg.connect(**server_conninfo(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class ConnectionSampler:
    """Samples PostgreSQL's sessions on one database by application_name every `interval` s."""

    def __init__(self, dbname: str, interval: float = 0.5):
        self.dbname, self.interval = dbname, interval
        self.max_by_app: dict[str, int] = defaultdict(int)
        self.max_total = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with psycopg.connect(**server_conninfo(), autocommit=True) as conn:
            while not self._stop.is_set():
                rows = conn.execute(
                    "SELECT application_name, count(*) FROM pg_stat_activity WHERE datname = %s GROUP BY 1",
                    [self.dbname],
                ).fetchall()
                for app, count in rows:
                    self.max_by_app[app] = max(self.max_by_app[app], count)
                self.max_total = max(self.max_total, sum(count for _, count in rows))
                self.samples += 1
                self._stop.wait(self.interval)

    def __enter__(self) -> "ConnectionSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(10)


# --- the processes -------------------------------------------------------------------------------


def deploy_env(**values: str) -> dict[str, str]:
    """What a PaaS gives every process: its config vars and PATH, nothing from this test process
    (in particular no DJANGO_SETTINGS_MODULE: the deploy must not need one)."""
    env = {
        "PATH": f"{VENV_BIN}{os.pathsep}/usr/local/bin:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/tmp"),
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "TMPDIR": tempfile.gettempdir(),
    }
    env.update(values)
    return env


@dataclass
class ProcfileProcess:
    """One Procfile line running as `sh -c <command>` in its own session (process group)."""

    name: str
    command: str
    cwd: Path
    env: dict[str, str]
    log_path: Path = field(init=False)

    def __post_init__(self):
        OUTPUT.mkdir(parents=True, exist_ok=True)
        self.log_path = OUTPUT / f"smoke-{self.name}-{os.getpid()}-{time.monotonic_ns()}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 (closed in stop)
        self.popen = subprocess.Popen(
            ["/bin/sh", "-c", self.command],
            cwd=self.cwd,
            env=self.env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def tail(self, chars: int = 4000) -> str:
        return f"--- {self.name} ({self.log_path}) ---\n{self.log()[-chars:]}"

    def wait_for_log(self, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.log():
                return
            if self.popen.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.popen.returncode}\n{self.tail()}")
            time.sleep(0.2)
        raise TimeoutError(f"{self.name} did not log {text!r} within {timeout} s\n{self.tail()}")

    def wait_for_http(self, url: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 (loopback)
                    if response.status == 200:
                        return
            except OSError:
                pass
            if self.popen.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.popen.returncode}\n{self.tail()}")
            time.sleep(0.2)
        raise TimeoutError(f"{self.name} did not answer {url} within {timeout} s\n{self.tail()}")

    def group_alive(self) -> bool:
        try:
            os.killpg(self.popen.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def terminate(self, grace: float = 30) -> float | None:
        """SIGTERM to the process group, as a PaaS stops a dyno. Returns the seconds until every
        process of the group was gone, or None if it had to be killed after `grace`."""
        started = time.monotonic()
        if self.group_alive():
            os.killpg(self.popen.pid, signal.SIGTERM)
        deadline = started + grace
        while time.monotonic() < deadline:
            self.popen.poll()
            if self.popen.returncode is not None and not self.group_alive():
                self._log.close()
                return time.monotonic() - started
            time.sleep(0.1)
        if self.group_alive():
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(10)
        self._log.close()
        return None


def run_command(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 120, **extra_env: str) -> str:
    """A one-off `python manage.py ...` (`heroku run`) against the deploy; its stdout."""
    result = subprocess.run(
        args, cwd=cwd, env={**env, **extra_env}, capture_output=True, text=True, timeout=timeout, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result.stdout
