"""What a bulk replay operation costs: N dead letters replayed by apps.operations in this process
(no worker, no pause between chunks), per chunk size: wall time, runs/s, and each chunk's
transaction time (p50 and max: how long one chunk holds its runs' row locks).

Private database (CHIME_BENCH_DB, default chime_bench_operations), created and migrated; the
dead letters are bulk-inserted once per round, outside the timing.

    .venv/bin/python -m bench.operations [--runs 100000] [--chunks 500,2000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DB = os.environ.get("CHIME_BENCH_DB", "chime_bench_operations")
ENV = {
    "DJANGO_SETTINGS_MODULE": "config.settings.base",
    "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{DB}",
    "SECRET_KEY": "bench",
    "REDIS_URL": "",
    "LOG_LEVEL": "ERROR",
}


def setup() -> None:
    import psycopg

    with psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DB]).fetchone():
            conn.execute(f'CREATE DATABASE "{DB}"')
    os.environ.update(ENV)
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0", "--skip-checks"], cwd=ROOT, check=True
    )
    import django

    django.setup()


def one_round(runs: int, chunk: int) -> dict:
    from django.conf import settings
    from django.db import connection

    from apps.jobs.models import JobDefinition, JobRun
    from apps.operations import services
    from apps.operations.models import Operation
    from apps.tenants.models import Tenant
    from apps.tenants.services import tenant_create
    from tests.operations.support import dead_letters

    Tenant.objects.filter(slug="bench-ops").delete()
    tenant = tenant_create(slug="bench-ops", name="Bench ops")
    job = JobDefinition.objects.create(
        tenant=tenant, name="bench", schedule_type="cron", cron_expression="0 * * * *", timezone="UTC",
        target_url="http://127.0.0.1:9/hook",
    )  # fmt: skip
    dead_letters(job, runs)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobs_jobrun; ANALYZE jobs_runattempt")
    settings.CHIME_OPERATION_CHUNK_SIZE = chunk
    services.send = lambda operation: None  # run here, not by an ops worker (no message to the broker)
    operation = services.operation_start(tenant=tenant, kind="replay", params={"job": str(job.id)})
    times: list[float] = []
    original = services.ReplayKind.chunk

    def timed(self, op, size):
        started = time.perf_counter()
        try:
            return original(self, op, size)
        finally:
            times.append(time.perf_counter() - started)

    services.ReplayKind.chunk = timed
    try:
        started = time.perf_counter()
        counts = services.operation_run(operation.pk, owner="bench", pause=0)
        wall = time.perf_counter() - started
    finally:
        services.ReplayKind.chunk = original
    assert counts == {"replayed": runs}, counts
    assert JobRun.objects.filter(definition=job, status="scheduled").count() == runs
    Operation.objects.filter(pk=operation.pk).delete()
    return {
        "runs": runs,
        "chunk": chunk,
        "wall_s": wall,
        "runs_per_s": runs / wall,
        "chunk_p50_ms": statistics.median(times) * 1000,
        "chunk_max_ms": max(times) * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--chunks", default="500,2000")
    args = parser.parse_args()
    setup()
    rows = [one_round(args.runs, int(chunk)) for chunk in args.chunks.split(",")]
    print(f"\nBulk replay of {args.runs:,} dead letters (one tenant, one process, no pause between chunks)\n")
    print("| chunk | wall | runs/s | chunk p50 | chunk max |")
    print("|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['chunk']} | {r['wall_s']:.1f} s | {r['runs_per_s']:,.0f} | {r['chunk_p50_ms']:.0f} ms "
            f"| {r['chunk_max_ms']:.0f} ms |"
        )


if __name__ == "__main__":
    main()
