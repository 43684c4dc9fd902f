"""The real Chime processes of a fault scenario, started as the Procfile starts them.

Each runs in its own session (process group), so a fault can signal a Celery worker together with
its pool children, and a stop can never leave one behind. Every process started here is stopped
by stop_all(), which the harness calls in a `finally` and at exit.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from .servers import die_with_parent

ROOT = Path(__file__).resolve().parents[2]  # this checkout: the harness, the receiver, the auditor
PYTHON = sys.executable
WORKER_QUEUES = "runs.high,runs.default,runs.low"


def chime_env(
    *, database_url: str, redis_url: str, process_type: str, code: Path = ROOT, **extra: str
) -> dict[str, str]:
    """Production settings as the Procfile runs them, pointed at the private servers, running the
    Chime checkout in `code` (this one by default; another to measure an older revision).

    Every CHIME_* variable of the caller's environment is dropped, so the scenario measures the
    defaults (requeue after 300 s, 30 s run leases, ...) and not somebody's tuning.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHIME_", "DJANGO_", "CELERY_"))}
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "config.settings.production",
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_url,
            "SECRET_KEY": "chime-chaos-not-a-secret-" + "x" * 40,
            "DEBUG": "false",
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true",
            "CHIME_PROCESS_TYPE": process_type,
            "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": str(code),
            "LOG_LEVEL": "INFO",
        }
    )
    env.update(extra)
    return env


class ChimeProcess:
    """A process in its own group, its output in `log_dir/<name>.log` (appended across restarts).
    It runs in the checkout named by its environment's PYTHONPATH."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log_dir: Path):
        log_dir.mkdir(parents=True, exist_ok=True)
        self.cwd = Path(env.get("PYTHONPATH") or ROOT)
        self.name = name
        self.args = args
        self.env = env
        self.log_path = log_dir / f"{name}.log"
        self._log = None
        self.popen: subprocess.Popen | None = None
        self.started_at = 0.0

    def start(self) -> ChimeProcess:
        self._log = open(self.log_path, "ab")  # noqa: SIM115 (closed in stop)
        self._log_offset = self._log.tell()
        self.popen = subprocess.Popen(
            self.args,
            cwd=self.cwd,
            env=self.env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        self.started_at = time.time()
        _STARTED.append(self)
        return self

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def log(self, since_start: bool = True) -> str:
        """This process's output (only the current start's by default)."""
        with open(self.log_path, "rb") as fh:
            if since_start:
                fh.seek(self._log_offset)
            return fh.read().decode(errors="replace")

    def wait_for_log(self, text: str, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.log():
                return
            if not self.alive():
                raise RuntimeError(f"{self.name} exited with {self.popen.returncode}:\n{self.log()[-3000:]}")
            time.sleep(0.1)
        raise TimeoutError(f"{self.name} did not log {text!r} within {timeout}s:\n{self.log()[-3000:]}")

    def signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, sig)

    def signal_main(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.popen.send_signal(sig)

    def wait(self, timeout: float) -> bool:
        try:
            self.popen.wait(timeout)
            return True
        except subprocess.TimeoutExpired:
            return False

    def kill(self) -> None:
        """SIGKILL to the whole group, then reap."""
        self.signal_group(signal.SIGKILL)
        self.wait(10)
        self._close()

    def stop(self, timeout: float = 30) -> float | None:
        """SIGTERM (after SIGCONT, in case a fault stopped it), SIGKILL after `timeout`.

        Returns the seconds it took to exit by itself, or None when it had to be killed.
        """
        took = None
        if self.alive():
            self.signal_group(signal.SIGCONT)
            t0 = time.monotonic()
            self.signal_main(signal.SIGTERM)
            if self.wait(timeout):
                took = time.monotonic() - t0
        self.signal_group(signal.SIGKILL)  # pool children a dead parent left behind
        if self.popen is not None:
            self.wait(10)
        self._close()
        return took

    def _close(self) -> None:
        if self._log and not self._log.closed:
            self._log.close()
        if self in _STARTED:
            _STARTED.remove(self)


_STARTED: list[ChimeProcess] = []


def stop_all() -> None:
    for process in reversed(list(_STARTED)):
        with contextlib.suppress(Exception):
            process.stop(timeout=10)


atexit.register(stop_all)


def scheduler(name: str, env: dict[str, str], log_dir: Path) -> ChimeProcess:
    """`python manage.py run_scheduler`, as in the Procfile."""
    return ChimeProcess(name, [PYTHON, "manage.py", "run_scheduler"], env, log_dir)


def worker(name: str, env: dict[str, str], log_dir: Path, concurrency: int = 2) -> ChimeProcess:
    """`celery -A config worker ...` with the Procfile's flags (and a node name per worker)."""
    celery = Path(PYTHON).parent / "celery"
    head = [str(celery)] if celery.exists() else [PYTHON, "-m", "celery"]
    args = [
        *head,
        "-A", "config", "worker",
        "-Q", WORKER_QUEUES,
        "--concurrency", str(concurrency),
        "--loglevel", "INFO",
        "--without-gossip",
        "--without-mingle",
        "-n", f"{name}@%h",
    ]  # fmt: skip
    return ChimeProcess(name, args, env, log_dir)


def start_scheduler(name: str, env: dict[str, str], log_dir: Path) -> ChimeProcess:
    process = scheduler(name, env, log_dir).start()
    process.wait_for_log("scheduler started")
    return process


def start_worker(name: str, env: dict[str, str], log_dir: Path) -> ChimeProcess:
    process = worker(name, env, log_dir).start()
    process.wait_for_log("ready.")
    return process


def manage(*args: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    """`python manage.py ...` in the checkout named by env's PYTHONPATH."""
    return subprocess.run(
        [PYTHON, "manage.py", *args],
        cwd=env["PYTHONPATH"],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class Receiver(ChimeProcess):
    """bench/receiver.py: answers 200 at once, records (arrival, webhook-id, scheduled-for) of every
    request, and writes them as JSON lines when it gets SIGTERM."""

    def __init__(self, port: int, log_dir: Path):
        self.port = port
        self.dump_path = log_dir / "deliveries.jsonl"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        args = [PYTHON, str(ROOT / "bench" / "receiver.py"), "--port", str(port), "--dump", str(self.dump_path)]
        super().__init__("receiver", args, env, log_dir)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def start(self) -> Receiver:
        self.dump_path.unlink(missing_ok=True)
        super().start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"receiver exited:\n{self.log()[-3000:]}")
            with contextlib.suppress(OSError):
                self.count()
                return self
            time.sleep(0.1)
        raise TimeoutError("receiver not up within 30 s")

    def count(self) -> int:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/_count", timeout=5) as response:
            return int(json.loads(response.read())["count"])

    def deliveries(self) -> list[tuple[float, str, str]]:
        """Stop (the receiver dumps on SIGTERM), then (arrival unix time, webhook-id, scheduled-for)."""
        self.stop(timeout=20)
        if not self.dump_path.exists():
            raise RuntimeError(f"receiver wrote no dump:\n{self.log()[-3000:]}")
        with open(self.dump_path) as fh:
            return [tuple(json.loads(line)) for line in fh if line.strip()]
