"""Chime's web process (uvicorn on the ASGI app, as the Procfile runs it) on a free port of 127.0.0.1.

For tests that need a real HTTP server in front of the test database, with production settings
(DEBUG off, HTTPS behind a proxy): requests must carry `X-Forwarded-Proto: https` as the proxy
adds it (PROXY_HEADERS), or they are redirected to https.
"""

import socket
import sys
import urllib.error
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass

from tests.support.processes import Process, process_env, wait_until

PROXY_HEADERS = {"X-Forwarded-Proto": "https"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Web:
    process: Process
    url: str  # http://127.0.0.1:PORT, no trailing slash

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as answer:  # noqa: S310 (our own URL)
                return answer.status == 200
        except (urllib.error.URLError, OSError) as error:
            if self.process.popen.poll() is not None:
                log = self.process.log()[-3000:]
                raise RuntimeError(f"web exited with {self.process.popen.returncode}:\n{log}") from error
            return False

    def wait_ready(self, timeout: float = 60) -> "Web":
        try:
            wait_until(self.healthy, timeout=timeout, message=f"{self.url}/healthz answers 200")
        except TimeoutError as error:
            raise TimeoutError(f"{error}\n{self.process.log()[-3000:]}") from None
        return self

    def stop(self) -> None:
        self.process.stop()


def start_web(name: str = "web", settings: str = "config.settings.production", workers: int = 1, **env: str) -> Web:
    """Start uvicorn and return at once (boot it beside other processes); call `wait_ready()`
    before the first request. The environment is the test processes' (tests/support/processes.py:
    the test database, REDIS_URL) with DEBUG off and the given settings module. With one worker,
    the process's pid is the one serving the requests."""
    port = free_port()
    args = [sys.executable, "-m", "uvicorn", "config.asgi:application", "--host", "127.0.0.1", "--port", str(port)]
    if workers > 1:
        args += ["--workers", str(workers)]
    extra = {"DJANGO_SETTINGS_MODULE": settings, "DEBUG": "false", "ALLOWED_HOSTS": "127.0.0.1", **env}
    return Web(Process(name, args, process_env(**extra)), f"http://127.0.0.1:{port}")


@contextmanager
def serving(name: str, *, settings: str = "config.settings.test", workers: int = 1, **env: str):
    """start_web, once /healthz answers; yields the Web and stops it after. Test settings by
    default: plain http, no proxy header needed."""
    web = start_web(name, settings=settings, workers=workers, **env)
    try:
        yield web.wait_ready()
    finally:
        web.stop()
