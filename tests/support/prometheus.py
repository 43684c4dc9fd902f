"""A real Prometheus server (Debian's `prometheus`) scraping Chime's processes, for the metrics
tests: its own port and data folder, a 1 s scrape interval, queried through its HTTP API."""

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tests.support.web import free_port


@dataclass
class Target:
    job: str
    address: str  # host:port
    path: str = "/metrics"
    bearer_token: str = ""


class Prometheus:
    def __init__(self, workdir: Path, targets: list[Target]):
        binary = shutil.which("prometheus")
        assert binary, "prometheus is missing: apt-get install prometheus (.ci/run installs it)"
        self.binary = binary
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.popen = None
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "prometheus.yml").write_text(self._config(targets))

    @staticmethod
    def _config(targets: list[Target]) -> str:
        jobs = []
        for target in targets:
            job = {
                "job_name": target.job,
                "metrics_path": target.path,
                "scrape_interval": "1s",
                "static_configs": [{"targets": [target.address]}],
            }
            if target.bearer_token:
                job["authorization"] = {"type": "Bearer", "credentials": target.bearer_token}
            jobs.append(job)
        return json.dumps({"global": {"scrape_interval": "1s", "evaluation_interval": "1s"}, "scrape_configs": jobs})

    def start(self) -> "Prometheus":
        self.log = open(self.workdir / "prometheus.log", "wb")  # noqa: SIM115 (closed in stop)
        self.popen = subprocess.Popen(
            [
                self.binary,
                f"--config.file={self.workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise RuntimeError(f"prometheus exited: {(self.workdir / 'prometheus.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as answer:  # noqa: S310
                    if answer.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.2)
        raise TimeoutError("prometheus not ready within 60 s")

    def query(self, expr: str) -> list[tuple[dict, float]]:
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
        with urllib.request.urlopen(url, timeout=10) as answer:  # noqa: S310 (our own server)
            body = json.loads(answer.read())
        assert body["status"] == "success", body
        return [(item["metric"], float(item["value"][1])) for item in body["data"]["result"]]

    def value(self, expr: str) -> float | None:
        result = self.query(expr)
        return result[0][1] if result else None

    def targets_up(self) -> dict[str, float]:
        return {metric["job"]: value for metric, value in self.query("up")}

    def stop(self) -> None:
        if self.popen and self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
        if self.popen:
            self.log.close()
