"""`./chime test` with no arguments: the whole suite as two pytest runs side by side.

Most of the suite's time is waiting (real schedulers, workers, Prometheus and Chromium doing their
part, leases and grace periods running out): a serial run kept the 2-core CI machine at a load of
about 1 and took ~35 minutes there. Each shard is an ordinary pytest run of whole test
directories, with a test database and a Redis database of its own (CHIME_TEST_DATABASE,
REDIS_URL), so no test shares state it did not share before; static files are collected once
first (both shards read them). A shard's output is printed whole when it ends, and the exit code
is the first non-zero one. `./chime test ARGS` runs one pytest with ARGS, as before;
CHIME_TEST_SHARDS=1 runs the whole suite in one.

    .venv/bin/python tests/support/shards.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable

# The directories whose tests wait the longest (real processes, faults), measured in serial runs:
# they go to shard 0; everything else, new directories included, to shard 1.
HEAVY = ["tests/scenarios", "tests/chaos", "tests/api", "clients/python/tests"]


def shard_paths() -> list[list[str]]:
    def is_tests(p: Path) -> bool:
        if p.is_dir():
            return p.name not in ("support", "__pycache__")
        return p.name.startswith("test_") and p.suffix == ".py"

    everything = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").iterdir() if is_tests(p))
    heavy = [p for p in HEAVY if (ROOT / p).exists()]
    return [heavy, [p for p in everything if p not in heavy]]


def redis_url_for(base: str, index: int) -> str:
    parts = urlsplit(base)
    db = int(parts.path.strip("/") or 0)
    return urlunsplit(parts._replace(path=f"/{(db - index) % 16}"))


def main() -> int:
    env = dict(os.environ)
    env.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.test")
    collect = "import django; django.setup(); from config.staticfiles import collect_if_stale; collect_if_stale()"
    subprocess.run([PYTHON, "-c", collect], cwd=ROOT, env=env, check=True)

    database = os.environ.get("CHIME_TEST_DATABASE", "test_chime")
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15")
    logs = ROOT / "test-output"
    logs.mkdir(exist_ok=True)
    running = []
    for index, paths in enumerate(shard_paths()):
        shard_env = {**env, "CHIME_TEST_DATABASE": f"{database}_s{index}", "REDIS_URL": redis_url_for(redis_url, index)}
        log = logs / f"shard-{index}.log"
        handle = log.open("w")
        print(f"shard {index}: {' '.join(paths)} (log: {log.relative_to(ROOT)})", flush=True)
        popen = subprocess.Popen(
            [PYTHON, "-m", "pytest", *paths], cwd=ROOT, env=shard_env, stdout=handle, stderr=subprocess.STDOUT
        )
        running.append((index, popen, handle, log, time.monotonic()))
    code = 0
    while running:
        for entry in list(running):
            index, popen, handle, log, started = entry
            if popen.poll() is None:
                continue
            running.remove(entry)
            handle.close()
            print(f"\n===== shard {index}: exit {popen.returncode} after {time.monotonic() - started:.0f} s =====")
            print(log.read_text(errors="replace"), flush=True)
            code = code or popen.returncode
        time.sleep(1)
    return code


if __name__ == "__main__":
    sys.exit(main())
