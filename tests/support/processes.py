"""Start the real Chime processes (Celery worker, scheduler) for scenario tests, and stop them."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings

ROOT = Path(__file__).resolve().parents[2]
OUTPUT = ROOT / "test-output" / "processes"


def database_url() -> str:
    db = settings.DATABASES["default"]
    user = db.get("USER") or "postgres"
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    return f"postgres://{user}{password}@{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}/{db['NAME']}"


def process_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "config.settings.test",
            "DATABASE_URL": database_url(),
            "REDIS_URL": settings.REDIS_URL,
            "PYTHONUNBUFFERED": "1",
            "CHIME_SCHEDULER_IDLE_SECONDS": "0.1",
        }
    )
    env.update(extra)
    return env


class Process:
    def __init__(self, name: str, args: list[str], env: dict[str, str]):
        OUTPUT.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.log_path = OUTPUT / f"{name}-{os.getpid()}-{time.monotonic_ns()}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 (closed in stop)
        self.popen = subprocess.Popen(
            args, cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, text: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.log():
                return
            if self.popen.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.popen.returncode}:\n{self.log()[-3000:]}")
            time.sleep(0.1)
        raise TimeoutError(f"{self.name} did not log {text!r} within {timeout}s:\n{self.log()[-3000:]}")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the whole process group (a Celery worker's children too)."""
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, sig)

    def stop(self, timeout: float = 10) -> None:
        if self.popen.poll() is None:
            self.kill(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill(signal.SIGKILL)
                self.popen.wait(5)
        self._log.close()


def start_worker(name: str = "worker", queues: str = "runs.high,runs.default,runs.low", concurrency: int = 2, **env):
    args = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "config",
        "worker",
        "-Q",
        queues,
        "--pool",
        "prefork",
        "--concurrency",
        str(concurrency),
        "--loglevel",
        "INFO",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        "-n",
        f"{name}-{time.monotonic_ns()}@%h",
    ]
    process = Process(name, args, process_env(**env))
    process.wait_for_log("ready.", timeout=60)
    return process


def start_scheduler(*extra_args: str, name: str = "scheduler", **env) -> Process:
    args = [sys.executable, "manage.py", "run_scheduler", *extra_args]
    process = Process(name, args, process_env(**env))
    process.wait_for_log("scheduler started", timeout=30)
    return process


def wait_until(condition, timeout: float, interval: float = 0.2, message: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"{message} not met within {timeout}s")
