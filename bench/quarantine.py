"""What quarantine costs a materialize batch: the common path (no bad row) against the loop it
replaced, measured in one run, and batches with poisoned rows; then the planning loop alone (CPU
time, no database), before and after, interleaved; and what the batch's one savepoint costs.

Times apps.scheduler.services.materialize_due_runs in this process, batches of
CHIME_SCHEDULER_BATCH_SIZE (1,000) over 10,000 due cron definitions of 100 tenants in a private
database (chime_bench_quarantine), against `materialize_before_quarantine`: the loop as it was
before (f85c166), same helpers, same data. Rounds alternate between the variants (order rotated,
tables vacuumed in between); medians.

    .venv/bin/python -m bench.quarantine [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DB = "chime_bench_quarantine"
ENV = {
    "DJANGO_SETTINGS_MODULE": "config.settings.base",
    "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{DB}",
    "SECRET_KEY": "bench",
    "REDIS_URL": "",
    "LOG_LEVEL": "ERROR",
}
DEFINITIONS = 10_000
TENANTS = 100
ZONES = ("UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo", "Australia/Lord_Howe")


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


def materialize_before_quarantine(*, partitions, now, batch_size):
    """apps.scheduler.services.materialize_due_runs as of f85c166 (the baseline)."""
    from django.conf import settings
    from django.db import transaction

    from apps.jobs.models import JobDefinition, JobStatus
    from apps.jobs.planning import insert_run_rows, plan_definition, run_rows_from_plan
    from apps.scheduler.services import PLANNING_FIELDS
    from apps.scheduler.sql import advance_definitions

    horizon = now + timedelta(seconds=settings.CHIME_SCHEDULER_LOOKAHEAD_SECONDS)
    with transaction.atomic():
        definitions = list(
            JobDefinition.objects.select_for_update(skip_locked=True)
            .filter(status=JobStatus.ACTIVE, next_fire_at__lte=horizon, partition__in=partitions)
            .order_by("next_fire_at")
            .only(*PLANNING_FIELDS)[:batch_size]
        )
        if not definitions:
            return 0, timedelta(0)
        runs, updates, lag = [], [], timedelta(0)
        for definition in definitions:
            plan = plan_definition(definition, now=now)
            lag = max(lag, plan.lag)
            runs.extend(run_rows_from_plan(definition, plan, now=now))
            last = max((r.scheduled_for for r in plan.runs), default=None)
            status = JobStatus.COMPLETED if plan.completed else JobStatus.ACTIVE
            updates.append((definition.id, plan.next_fire_at, status, last))
        insert_run_rows(runs, now=now)
        advance_definitions(updates, now=now)
    return len(definitions), lag


def planning_loop_before(definitions, now):
    """The planning loop of f85c166's materialize_due_runs, without the database."""
    from apps.jobs.models import JobStatus
    from apps.jobs.planning import plan_definition, run_rows_from_plan

    runs, updates, lag = [], [], timedelta(0)
    for definition in definitions:
        plan = plan_definition(definition, now=now)
        lag = max(lag, plan.lag)
        runs.extend(run_rows_from_plan(definition, plan, now=now))
        last = max((r.scheduled_for for r in plan.runs), default=None)
        status = JobStatus.COMPLETED if plan.completed else JobStatus.ACTIVE
        updates.append((definition.id, plan.next_fire_at, status, last))
    return runs, updates


def planning_loop_after(definitions, now):
    """The planning loop of materialize_due_runs with quarantine, without the database."""
    from apps.jobs.models import JobStatus
    from apps.jobs.planning import plan_definition, run_rows_from_plan

    runs, updates, unplannable, lag = [], [], [], timedelta(0)
    for definition in definitions:
        mark = len(runs)
        try:
            plan = plan_definition(definition, now=now)
            runs.extend(run_rows_from_plan(definition, plan, now=now))
        except Exception as error:
            del runs[mark:]
            unplannable.append((definition, error))
            continue
        lag = max(lag, plan.lag)
        last = max((r.scheduled_for for r in plan.runs), default=None)
        status = JobStatus.COMPLETED if plan.completed else JobStatus.ACTIVE
        updates.append((definition.id, plan.next_fire_at, status, last))
    return runs, updates


def compare_planning_loops(now: datetime, repeats: int) -> dict[str, list[float]]:
    """CPU time of the two loops over the same 1,000 definitions, interleaved."""
    from apps.jobs.models import JobDefinition
    from apps.scheduler.services import PLANNING_FIELDS

    definitions = list(JobDefinition.objects.only(*PLANNING_FIELDS)[:1000])
    times: dict[str, list[float]] = {"before": [], "after": []}
    for _ in range(repeats):
        for name, loop in (("before", planning_loop_before), ("after", planning_loop_after)):
            t0 = time.process_time()
            loop(definitions, now)
            times[name].append(time.process_time() - t0)
    return times


def savepoint_cost(repeats: int = 500) -> float:
    """Seconds for one empty `transaction.atomic()` savepoint inside a transaction (what
    write_batch adds per batch), median of `repeats`."""
    from django.db import transaction

    times = []
    with transaction.atomic():
        for _ in range(repeats):
            t0 = time.perf_counter()
            with transaction.atomic():
                pass
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def load(fire_at: datetime) -> list:
    from apps.core.ids import uuid7
    from apps.jobs.models import JobDefinition, partition_for
    from apps.tenants.models import Tenant
    from apps.tenants.services import tenant_create

    tenants = [Tenant.objects.filter(slug=f"q{i}").first() or tenant_create(slug=f"q{i}") for i in range(TENANTS)]
    JobDefinition.objects.all().delete()
    rows = []
    for i in range(DEFINITIONS):
        job_id = uuid7()
        rows.append(
            JobDefinition(
                id=job_id,
                partition=partition_for(job_id),
                tenant=tenants[i % TENANTS],
                name=f"q-{i}",
                schedule_type="cron",
                cron_expression="*/5 * * * *",
                timezone=ZONES[i % len(ZONES)],
                next_fire_at=fire_at,
                target_url="http://127.0.0.1:9/hook",
            )
        )
    JobDefinition.objects.bulk_create(rows, batch_size=2000)
    return [row.id for row in rows]


def reset(fire_at: datetime, poisoned: list) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM jobs_jobrun")
        cursor.execute(
            "UPDATE jobs_jobdefinition SET next_fire_at = %s, status = 'active', status_reason = '', "
            "timezone = CASE WHEN id = ANY(%s) THEN 'Mars/Olympus' WHEN timezone = 'Mars/Olympus' THEN 'UTC' "
            "ELSE timezone END",
            [fire_at, poisoned],
        )
    with connection.cursor() as cursor:  # autocommit: VACUUM cannot run in a transaction
        cursor.execute("VACUUM ANALYZE jobs_jobdefinition, jobs_jobrun")


def one_round(function, now: datetime, partitions: list[int]) -> list[float]:
    times = []
    while True:
        t0 = time.perf_counter()
        processed, _ = function(partitions=partitions, now=now, batch_size=1000)
        elapsed = time.perf_counter() - t0
        if not processed:
            return times
        times.append(elapsed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    setup()
    import logging

    from apps.jobs.models import JobDefinition, JobStatus
    from apps.scheduler.services import materialize_due_runs

    logging.getLogger("apps.scheduler").setLevel(logging.ERROR)  # 10 quarantine lines per round
    fire_at = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=5)
    now = fire_at + timedelta(seconds=1)
    ids = load(fire_at)
    one_per_batch = ids[:: len(ids) // 10][:10]  # all share next_fire_at; the scan takes them in some order
    partitions = list(range(64))
    variants = {
        "before quarantine (f85c166 loop)": (materialize_before_quarantine, []),
        "with quarantine, no bad row": (materialize_due_runs, []),
        "with quarantine, 10 poisoned rows in 10,000": (materialize_due_runs, one_per_batch),
    }
    results: dict[str, list[float]] = {name: [] for name in variants}
    one_round(materialize_due_runs, now, partitions)  # warm caches (schedules, zones, connection)
    names = list(variants)
    for index in range(args.rounds):
        for name in names[index % 3 :] + names[: index % 3]:  # rotated: no variant always runs first
            function, poisoned = variants[name]
            reset(fire_at, poisoned)
            results[name].extend(one_round(function, now, partitions))
            if poisoned:
                assert JobDefinition.objects.filter(id__in=poisoned, status=JobStatus.PAUSED).count() == len(poisoned)
    reset(fire_at, [])
    loops = compare_planning_loops(now, repeats=10 * args.rounds)
    print(f"machine: {platform.node()} {os.cpu_count()} cpus, Python {platform.python_version()}")
    print(f"planning loop alone (no database), 1,000 definitions, CPU time, median of {10 * args.rounds}:")
    for name, times in loops.items():
        print(f"  {name} quarantine: {statistics.median(times) * 1000:.1f} ms")
    print(f"one savepoint per batch (SAVEPOINT + RELEASE, median of 500): {savepoint_cost() * 1000:.2f} ms")
    print(f"{DEFINITIONS:,} due cron definitions of {TENANTS} tenants, batches of 1,000, {args.rounds} rounds\n")
    print("| variant | batches | median per batch | p90 per batch | definitions/s |")
    print("|---|---|---|---|---|")
    for name, times in results.items():
        median = statistics.median(times)
        p90 = sorted(times)[int(0.9 * (len(times) - 1))]
        print(f"| {name} | {len(times)} | {median * 1000:.1f} ms | {p90 * 1000:.1f} ms | {1000 / median:,.0f} |")


if __name__ == "__main__":
    main()
