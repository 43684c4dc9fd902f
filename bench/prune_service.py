"""What apps/history's prune costs with its archive: runs/s, WAL and bytes per run, on the real schema.

Loads --runs finished runs (one attempt each, 90 % succeeded, 5 % failed, 5 % skipped) of one
tenant and one job over --days days ending 40 days ago (INSERT ... SELECT in the migrated bench
database), then calls `prune_tenant` with the archive in a temporary directory, and reports its
wall time, batches, runs/s, archive bytes per run and this database's WAL (bench/pgcost.py).
Failed runs are younger than the dead-letter retention, so they stay: the pass reads past them.

    CHIME_BENCH_DB=chime_history_bench .venv/bin/python -m bench.prune_service --runs 200000 --days 2
"""

# ruff: noqa: S608 - statements built from this file's constants and numbers only

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time

from bench.common import BENCH_DB, PG_ADMIN_DSN, ensure_database, pg_connect, setup_django
from bench.pgcost import WalCounter


def load(*, tenant, job, runs: int, days: int) -> float:
    start = time.perf_counter()
    span = days * 86400
    ts = f"(now() - interval '40 days' - ({span} - i::float8 * {span} / {runs}) * interval '1 second')"
    uuid = (
        f"(lpad(to_hex(floor(extract(epoch from {ts}) * 1000)::bigint), 12, '0') || '7' "
        "|| substr(md5('r' || i), 1, 3) || '8' || substr(md5('r' || i), 4, 15))::uuid"
    )
    with pg_connect() as conn:
        conn.execute(
            f"""INSERT INTO jobs_jobrun (id, tenant_id, definition_id, partition, priority, scheduled_for, trigger,
                status, status_reason, available_at, attempt_count, attempts_before_replay, lease_owner, created_at,
                queued_at, started_at, finished_at)
            SELECT {uuid}, %s, %s, %s, 'default', {ts}, 'schedule',
                CASE WHEN i %% 20 = 0 THEN 'failed' WHEN i %% 20 = 1 THEN 'skipped' ELSE 'succeeded' END, '', {ts},
                1, 0, '', {ts}, {ts}, {ts}, {ts} + interval '40 ms'
            FROM generate_series(0, {runs - 1}) AS i""",
            [tenant.pk, job.pk, job.partition],
        )
        conn.execute(
            """INSERT INTO jobs_runattempt (id, run_id, number, started_at, finished_at, status_code, error,
                error_kind, duration_ms, response_excerpt, request_headers, worker)
            SELECT gen_random_uuid(), r.id, 1, r.started_at, r.finished_at, 200, '', '', 40, '{"ok": true}',
                '{"webhook-id": "msg_2q", "content-type": "application/json", "user-agent": "Chime/1"}', 'w-1'
            FROM jobs_jobrun r WHERE r.tenant_id = %s""",
            [tenant.pk],
        )
        conn.execute("VACUUM ANALYZE jobs_jobrun")
        conn.execute("VACUUM ANALYZE jobs_runattempt")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200_000)
    parser.add_argument("--days", type=int, default=2)
    args = parser.parse_args()
    ensure_database()
    setup_django()
    from django.conf import settings
    from django.test.utils import override_settings
    from django.utils import timezone

    from apps.history import services
    from apps.jobs.models import JobDefinition
    from apps.tenants.services import tenant_create

    archive_dir = tempfile.mkdtemp(prefix="chime-prune-bench-")
    storages = {**settings.STORAGES, "chime_archive": {**settings.STORAGES["chime_archive"]}}
    storages["chime_archive"]["OPTIONS"] = {"location": archive_dir}
    try:
        tenant = tenant_create(slug=f"prune-{int(time.time())}", name="prune bench")
        job = JobDefinition.objects.create(
            tenant=tenant, name="prune", schedule_type="cron", cron_expression="* * * * *", target_url="http://x/"
        )
        report = {
            "runs loaded": args.runs,
            "load s": round(load(tenant=tenant, job=job, runs=args.runs, days=args.days), 1),
        }
        with pg_connect() as conn, override_settings(STORAGES=storages):
            wal = WalCounter(conn)
            wal.start()
            start = time.perf_counter()
            result = services.prune_tenant(tenant=tenant, now=timezone.now(), progress=lambda d, t: wal.poll())
            seconds = time.perf_counter() - start
            wal.poll()
        report.update(
            {
                "pruned runs": result.runs,
                "kept (dead letters)": args.runs - result.runs,
                "batches": result.batches,
                "wall s": round(seconds, 2),
                "runs/s": round(result.runs / seconds),
                "archive bytes/run": round(result.bytes / max(result.runs, 1)),
                "WAL bytes/run (this database)": round(wal.totals["bytes"] / max(result.runs, 1)),
                "WAL lost ranges": wal.lost_ranges,
            }
        )
        print(json.dumps(report, indent=2))
    finally:
        shutil.rmtree(archive_dir, ignore_errors=True)
        from django.db import connections

        connections.close_all()
        with pg_connect(PG_ADMIN_DSN) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{BENCH_DB}" WITH (FORCE)')


if __name__ == "__main__":
    main()
