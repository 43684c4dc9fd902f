"""The history bench's bulk load: cron jobs of several tenants and ~40 days of their runs and
attempts, with COPY (psycopg 3), as a busy installation's tables would hold them.

Shape (scaled by --runs; 10M runs at factor 1): 26,720 cron jobs whose periods are those of real
schedules (20 every minute, 100 every 5 min, 600 every 15 min, 3,000 hourly, 8,000 every 4 h,
15,000 daily); half of them belong to the first tenant (the one measured), the rest spread over
the other tenants. Every occurrence of the window has its run, made 1 s before its time (created_at
and the UUIDv7 id), in time order, as the scheduler writes them: unique (definition,
scheduled_for) holds by construction and is checked when its index is rebuilt.

Statuses: 2 % dead letters (`failed` after 3 attempts: 503s and timeouts), 5 % succeeded on the
2nd attempt, 0.5 % on the 3rd, the rest on the 1st; in the last day 0.5 % are `retrying` after 1-2
attempts (available_at a day ahead, so the spike's scheduler leaves them alone) and each
every-minute job has its next 60 occurrences a day ahead `scheduled` (no attempt yet). Attempts
carry the headers the worker stores (webhook-id/-signature, Chime-*, traceparent, a redacted
Authorization) and a response excerpt.

The loaded jobs' next_fire_at is put 60 days ahead: the history's jobs must not fire during the
bench (the spike measures its own jobs only). Loading drops the secondary indexes and unique
constraints of jobs_jobrun / jobs_runattempt and rebuilds them afterwards, with FK triggers off
for the loading sessions (every row points at a loaded job / run); two processes COPY disjoint
halves of the window.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import time
from datetime import UTC, datetime, timedelta

from bench.common import LOGS, copy_definitions, copy_text_time, log, pg_connect, setup_django

DAY_MINUTES = 1440
# (period in minutes, jobs at 10M runs)
PERIODS = ((1, 20), (5, 100), (15, 600), (60, 3000), (240, 8000), (1440, 15000))
RUN_COLUMNS = (
    "id",
    "partition",
    "priority",
    "scheduled_for",
    "trigger",
    "status",
    "status_reason",
    "available_at",
    "attempt_count",
    "lease_owner",
    "created_at",
    "queued_at",
    "started_at",
    "finished_at",
    "definition_id",
    "tenant_id",
    "attempts_before_replay",
)
ATTEMPT_COLUMNS = (
    "id",
    "number",
    "started_at",
    "finished_at",
    "status_code",
    "error",
    "error_kind",
    "duration_ms",
    "response_excerpt",
    "request_headers",
    "worker",
    "run_id",
)
DROPPED_FILE = LOGS / "history-dropped-indexes.json"
TABLES = ("jobs_jobrun", "jobs_runattempt")


def job_counts(runs: int) -> list[tuple[int, int]]:
    """(period, jobs) scaled to about `runs` runs over 40 days (at least one job per period)."""
    factor = runs / 10_000_000
    return [(period, max(1, round(jobs * factor))) for period, jobs in PERIODS]


def cron_expression(period: int, phase: int) -> str:
    if period == 1:
        return "* * * * *"
    if period < 60:
        return f"{phase}-59/{period} * * * *"
    if period == 60:
        return f"{phase} * * * *"
    if period < DAY_MINUTES:
        return f"{phase % 60} {phase // 60}-23/{period // 60} * * *"
    return f"{phase % 60} {phase // 60} * * *"


def load_jobs(*, tenants: list, runs: int, target_url: str) -> tuple[list[dict], float]:
    """COPY the cron jobs for `runs` runs in 40 days (job 0: every minute, of tenants[0]); returns
    them and the seconds taken."""
    setup_django()
    from apps.jobs.schedules import CronSchedule

    rng = random.Random(14)
    slots = [(period, k) for period, count in job_counts(runs) for k in range(count)]
    first, rest = slots[0], slots[1:]
    rng.shuffle(rest)
    slots = [first, *rest]
    # Job k belongs to tenants[0] when k is even, else to one of the others in turn.
    others = tenants[1:] or tenants
    owners = [t for other in others for t in (tenants[0], other)]
    far = copy_text_time(datetime.now(UTC) + timedelta(days=60))
    seconds = copy_definitions(
        tenant=tenants[0],
        tenants=owners,
        target_url=target_url,
        fire_texts=iter(lambda: far, None),
        count=len(slots),
        name_prefix="history",
        skip_fk_checks=True,
    )
    expressions = {}
    with pg_connect() as conn:
        rows = conn.execute(
            "SELECT id, tenant_id, partition, priority, name FROM jobs_jobdefinition WHERE name LIKE 'history-%%'"
        ).fetchall()
        jobs = [None] * len(slots)
        for job_id, tenant_id, partition, priority, name in rows:
            k = int(name.rsplit("-", 1)[1])
            period = slots[k][0]
            phase = 0 if period == 1 else rng.randrange(period)
            expression = cron_expression(period, phase)
            if expression not in expressions:
                CronSchedule.parse(expression, "UTC")  # a real schedule, or the dashboard could not show it
                expressions[expression] = []
            expressions[expression].append(job_id)
            jobs[k] = {
                "id": job_id.hex,
                "dashed": str(job_id),
                "tenant": tenant_id.hex,
                "partition": partition,
                "priority": priority,
                "period": period,
                "phase": phase,
                "name": name,
            }
        t0 = time.perf_counter()
        for expression, ids in expressions.items():
            conn.execute(
                "UPDATE jobs_jobdefinition SET schedule_type = 'cron', cron_expression = %s, run_at = NULL, "
                "retry_max_attempts = 3 WHERE id = ANY(%s)",
                [expression, ids],
            )
        seconds += time.perf_counter() - t0
    return jobs, seconds


# --- rows -----------------------------------------------------------------------------------


def _dashed(h: str) -> str:
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


SUCCESS_EXCERPTS = ('{"ok":true}', '{"status":"accepted","queued":true}', "OK", "")
FAILURES = (
    (
        503,
        "http",
        "HTTP 503",
        "<html><head><title>503 Service Temporarily Unavailable</title></head><body>"
        "<center><h1>503 Service Temporarily Unavailable</h1></center><hr><center>nginx</center></body></html>",
    ),
    (None, "timeout", "Timed out after 30 s waiting for the response", ""),
    (500, "http", "HTTP 500", '{"error":"internal","detail":"upstream database unavailable"}'),
)


class Writer:
    """Text COPY rows for one block of minutes (a run and its attempts at a time)."""

    def __init__(self, now: datetime, seed: int):
        self.rng = random.Random(seed)
        self.runs: list[str] = []
        self.attempts: list[str] = []
        self.retry_from = now - timedelta(days=1)
        self.later = copy_text_time(now + timedelta(days=1))
        self.counts = {"runs": 0, "attempts": 0}

    def run(self, job: dict, at: datetime, k: int, *, status: str | None = None) -> None:
        """Run k of the minute `at` for `job` (k < 4096 * 60,000: ids unique per minute)."""
        ms = int(at.timestamp() * 1000) - 1000 + (k >> 12)
        head = ((ms << 16) | 0x7000 | (k & 0x0FFF)).to_bytes(8, "big")
        tail = bytearray(os.urandom(8))
        tail[0] = 0x80 | (tail[0] & 0x3F)
        run_id = (head + tail).hex()
        minute = at.strftime("%Y-%m-%d %H:%M:")
        created = (at - timedelta(seconds=1)).strftime("%Y-%m-%d %H:%M:%S+00")
        sf = f"{minute}00+00"
        if status == "scheduled":
            self.runs.append(
                f"{run_id}\t{job['partition']}\t{job['priority']}\t{sf}\tschedule\tscheduled\t\t{sf}\t0\t\t"
                f"{created}\t\\N\t\\N\t\\N\t{job['id']}\t{job['tenant']}\t0\n"
            )
            self.counts["runs"] += 1
            return
        r = self.rng.random()
        if at >= self.retry_from and r < 0.005:
            status, tries = "retrying", 1 + (r < 0.0025)
        elif r < 0.02:
            status, tries = "failed", 3
        elif r < 0.07:
            status, tries = "succeeded", 2
        elif r < 0.075:
            status, tries = "succeeded", 3
        else:
            status, tries = "succeeded", 1
        dashed = _dashed(run_id)
        start = 0.2 + self.rng.random() * 0.3
        finished = "\\N"
        for number in range(1, tries + 1):
            last_ok = status == "succeeded" and number == tries
            duration = self.rng.randint(40, 900) if last_ok else self.rng.randint(100, 5000)
            code, kind, error, excerpt = (
                (200, "", "", self.rng.choice(SUCCESS_EXCERPTS)) if last_ok else (self.rng.choice(FAILURES))
            )
            end = start + duration / 1000
            begin_text, finished = f"{minute}{start:06.3f}+00", f"{minute}{end:06.3f}+00"
            headers = json.dumps(
                {
                    "Content-Type": "application/json",
                    "Authorization": "[redacted]",
                    "Idempotency-Key": dashed,
                    "Chime-Run-Id": dashed,
                    "Chime-Job-Id": job["dashed"],
                    "Chime-Attempt": str(number),
                    "Chime-Scheduled-For": f"{minute}00Z".replace(" ", "T"),
                    "webhook-id": dashed,
                    "webhook-timestamp": str(int(at.timestamp() + start)),
                    "webhook-signature": "v1," + os.urandom(32).hex()[:43] + "=",
                    "traceparent": f"00-{run_id}-{os.urandom(8).hex()}-01",
                }
            )
            attempt_id = run_id[:12] + f"7{number:03x}" + run_id[16:]  # same time prefix, unique per run
            self.attempts.append(
                f"{attempt_id}\t{number}\t{begin_text}\t{finished}\t{code if code is not None else chr(92) + 'N'}\t"
                f"{error}\t{kind}\t{duration}\t{excerpt}\t{headers}\tcelery@worker-{k % 4}:{1000 + k % 8}\t{run_id}\n"
            )
            start = end + 10 * 2 ** (number - 1)  # the retry backoff: 10 s, then 20 s
        self.counts["attempts"] += tries
        self.counts["runs"] += 1
        started = f"{minute}{0.2:06.3f}+00"
        queued = f"{minute}00.050+00"
        if status == "retrying":
            finished, available, reason = "\\N", self.later, "HTTP 503; next try in a day (bench)"
        else:
            available, reason = sf, ("3 attempts failed: HTTP 503" if status == "failed" else "")
        self.runs.append(
            f"{run_id}\t{job['partition']}\t{job['priority']}\t{sf}\tschedule\t{status}\t{reason}\t{available}\t"
            f"{tries}\t\t{created}\t{queued}\t{started}\t{finished}\t{job['id']}\t{job['tenant']}\t0\n"
        )


def _due_by_minute(jobs: list[dict]) -> dict[int, dict[int, list[dict]]]:
    groups: dict[int, dict[int, list[dict]]] = {}
    for job in jobs:
        groups.setdefault(job["period"], {}).setdefault(job["phase"], []).append(job)
    return groups


def _load_range(args: tuple) -> dict[str, float]:
    """One loading process: COPY the runs and attempts of minutes [first, last) in blocks."""
    jobs, start_ts, now_ts, first, last, block = args
    start, now = datetime.fromtimestamp(start_ts, UTC), datetime.fromtimestamp(now_ts, UTC)
    groups = _due_by_minute(jobs)
    totals = {"runs": 0, "attempts": 0}
    with pg_connect(autocommit=False) as conn, conn.cursor() as cur:
        cur.execute("SET session_replication_role = replica")  # FK triggers off: every parent exists
        cur.execute("SET synchronous_commit = off")
        for block_start in range(first, last, block):
            writer = Writer(now, seed=block_start)
            for m in range(block_start, min(block_start + block, last)):
                at = start + timedelta(minutes=m)
                k = 0
                for period, phases in groups.items():
                    for job in phases.get(m % period, ()):
                        writer.run(job, at, k)
                        k += 1
            _copy(cur, writer)
            conn.commit()
            for name in totals:
                totals[name] += writer.counts[name]
    return totals


def _copy(cur, writer: Writer) -> None:
    with cur.copy(f"COPY jobs_jobrun ({', '.join(RUN_COLUMNS)}) FROM STDIN") as copy:
        copy.write("".join(writer.runs))
    if writer.attempts:
        with cur.copy(f"COPY jobs_runattempt ({', '.join(ATTEMPT_COLUMNS)}) FROM STDIN") as copy:
            copy.write("".join(writer.attempts))


def check_columns() -> None:
    """Every NOT NULL column without a default is loaded: a new one fails here, not in the COPY."""
    with pg_connect() as conn:
        for table, columns in zip(TABLES, (RUN_COLUMNS, ATTEMPT_COLUMNS), strict=True):
            rows = conn.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped "
                "AND attnotnull AND NOT atthasdef",
                [table],
            ).fetchall()
            missing = {name for (name,) in rows} - set(columns)
            assert not missing, f"{table}: the history load does not fill {sorted(missing)}"


def drop_secondary() -> None:
    """Drop every index but the primary keys (unique constraints as constraints), saved to a file
    so that a crashed run's indexes are rebuilt by the next one (restore_secondary)."""
    saved = []
    with pg_connect() as conn:
        for table in TABLES:
            rows = conn.execute(
                "SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid), c.conname, "
                "pg_get_constraintdef(c.oid) FROM pg_index i LEFT JOIN pg_constraint c ON c.conindid = i.indexrelid "
                "AND c.contype = 'u' WHERE i.indrelid = %s::regclass AND NOT i.indisprimary",
                [table],
            ).fetchall()
            for index, indexdef, conname, condef in rows:
                saved.append([table, index, indexdef, conname, condef])
        LOGS.mkdir(parents=True, exist_ok=True)
        DROPPED_FILE.write_text(json.dumps(saved))
        for table, index, _indexdef, conname, _condef in saved:
            if conname:
                conn.execute(f'ALTER TABLE {table} DROP CONSTRAINT "{conname}"')
            else:
                conn.execute(f'DROP INDEX "{index}"')


def restore_secondary() -> float:
    """Rebuild what drop_secondary dropped (the unique constraints check every loaded row)."""
    if not DROPPED_FILE.exists():
        return 0.0
    t0 = time.perf_counter()
    with pg_connect() as conn:
        conn.execute("SET maintenance_work_mem = '1GB'")
        conn.execute("SET max_parallel_maintenance_workers = 2")
        for table, index, indexdef, conname, condef in json.loads(DROPPED_FILE.read_text()):
            exists = conn.execute("SELECT to_regclass(%s)", [index]).fetchone()[0]
            if exists:
                continue
            if conname:
                conn.execute(f'ALTER TABLE {table} ADD CONSTRAINT "{conname}" {condef}')
            else:
                conn.execute(indexdef)
    DROPPED_FILE.unlink()
    return time.perf_counter() - t0


def load_history(*, jobs: list[dict], days: int, processes: int = 2, block: int = 120) -> dict:
    """COPY every run of the window [today 00:00 UTC - days, now - 10 min) and the scheduled runs
    a day ahead; rebuild the indexes; VACUUM ANALYZE. Returns counts and seconds per step."""
    check_columns()
    now = datetime.now(UTC)
    start = now.replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=days)
    minutes = int((now - timedelta(minutes=10) - start).total_seconds() // 60)
    out: dict = {"window_start": start, "minutes": minutes}
    restore_secondary()
    t0 = time.perf_counter()
    drop_secondary()
    cuts = [minutes * i // processes for i in range(processes + 1)]
    parts = [(jobs, start.timestamp(), now.timestamp(), cuts[i], cuts[i + 1], block) for i in range(processes)]
    log(f"history: COPY {minutes:,} minutes of runs with {processes} processes")
    with multiprocessing.get_context("fork").Pool(processes) as pool:
        totals = pool.map(_load_range, parts)
    writer = Writer(now, seed=0)
    ahead = start + timedelta(minutes=minutes + DAY_MINUTES)
    every_minute = [j for j in jobs if j["period"] == 1]
    for m in range(60):
        for k, job in enumerate(every_minute):
            writer.run(job, ahead + timedelta(minutes=m), k, status="scheduled")
    with pg_connect(autocommit=False) as conn, conn.cursor() as cur:
        _copy(cur, writer)
        conn.commit()
    out["runs"] = sum(t["runs"] for t in totals) + writer.counts["runs"]
    out["attempts"] = sum(t["attempts"] for t in totals)
    out["copy_seconds"] = time.perf_counter() - t0
    log(f"history: {out['runs']:,} runs, {out['attempts']:,} attempts in {out['copy_seconds']:.0f} s; indexes")
    out["index_seconds"] = restore_secondary()
    t1 = time.perf_counter()
    with pg_connect() as conn:
        for table in TABLES:
            conn.execute(f"VACUUM (ANALYZE) {table}")
    out["vacuum_seconds"] = time.perf_counter() - t1
    out["total_seconds"] = time.perf_counter() - t0
    log(f"history: indexes {out['index_seconds']:.0f} s, VACUUM ANALYZE {out['vacuum_seconds']:.0f} s")
    return out
