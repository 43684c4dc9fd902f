"""Baseline: django-celery-beat's DatabaseScheduler with N every-minute tasks on the same machine.

Creates N `* * * * *` PeriodicTasks (bench/beat_settings.py adds django_celery_beat to Chime's
settings; migrated into chime_bench) pointing at a no-op task name on their own queue, runs
`celery -A config beat -S django_celery_beat.schedulers:DatabaseScheduler` until --tail seconds
after the --minutes-th minute boundary, and
takes each message off Redis as soon as beat pushes it (timestamped on arrival; no worker runs
the no-op). Beat's crontab semantics: an entry is due at the first minute boundary after its
last_run_at, which beat sets to the send time; lateness = send time - that boundary. Reports
messages sent per minute against N due per minute, lateness p50/p95/p99, occurrences skipped.

    .venv/bin/python -m bench.beat --tasks 1000,10000
"""

from __future__ import annotations

import base64
import json
import math
import sys
import threading
import time
from collections import Counter, defaultdict
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable as `python bench/x.py` too

from bench.common import (
    LOGS,
    PYTHON,
    Process,
    Report,
    base_parser,
    bench_env,
    cpu_seconds,
    ensure_database,
    fmt,
    log,
    percentiles,
    pids_named,
    processes,
    redis_client,
    setup_django,
    table,
)

SETTINGS = "bench.beat_settings"
QUEUE = "bench.beat"
TASK = "bench.noop"


class Collector(threading.Thread):
    """Pops beat's messages off the Redis list as they arrive: (arrival unix time, entry name)."""

    def __init__(self):
        super().__init__(daemon=True)
        self.redis = redis_client()
        self.seen: list[tuple[float, str]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            first = self.redis.brpop([QUEUE], timeout=0.2)
            if first is None:
                continue
            now = time.time()
            batch = [first[1]]
            while True:
                more = self.redis.rpop(QUEUE, 1000)
                if not more:
                    break
                batch.extend(more)
            for raw in batch:
                self.seen.append((now, _entry_name(raw)))

    def stop(self) -> None:
        time.sleep(1.0)
        self.stopping.set()
        self.join(5)


def _entry_name(raw: bytes) -> str:
    message = json.loads(raw)
    name = message.get("headers", {}).get("periodic_task_name")
    if name:
        return name
    args = json.loads(base64.b64decode(message["body"]))[0]  # protocol 2 body: [args, kwargs, embed]
    return f"bench-{args[0]}"


def next_boundary(ts: float) -> float:
    """The first minute boundary strictly after ts (what crontab('*') is due at after last_run_at)."""
    return (math.floor(ts / 60) + 1) * 60


def analyse(seen: list[tuple[float, str]], start_last_run: float, tasks: int, boundaries: list[float]) -> dict:
    by_entry: dict[str, list[float]] = defaultdict(list)
    for ts, name in seen:
        by_entry[name].append(ts)
    lateness_first, lateness_later, skipped = [], [], 0
    for times in by_entry.values():
        times.sort()
        previous = start_last_run
        for k, ts in enumerate(times):
            due = next_boundary(previous)
            late = ts - due
            (lateness_first if k == 0 else lateness_later).append(late)
            skipped += max(0, math.floor(late / 60))
            previous = ts
    per_minute = Counter(math.floor(ts / 60) * 60 for ts, _ in seen)
    # Occurrences that were due in the window: one per task per boundary.
    due_total = tasks * len(boundaries)
    return {
        "sent": len(seen),
        "entries_sent": len(by_entry),
        "per_minute": [per_minute.get(b, 0) for b in boundaries],
        "minutes": [datetime.fromtimestamp(b, UTC).strftime("%H:%M") for b in boundaries],
        "due_total": due_total,
        "late_all": percentiles(lateness_first + lateness_later),
        "late_first": percentiles(lateness_first),
        "late_later": percentiles(lateness_later),
        "skipped": skipped,
    }


def run_once(tasks: int, minutes: int, tail: float) -> dict:
    from django_celery_beat.models import CrontabSchedule, PeriodicTask, PeriodicTasks

    PeriodicTask.objects.all().delete()
    CrontabSchedule.objects.all().delete()
    redis_client().flushdb()
    every_minute = CrontabSchedule.objects.create(
        minute="*", hour="*", day_of_week="*", day_of_month="*", month_of_year="*", timezone="UTC"
    )
    created = datetime.now(UTC)
    PeriodicTask.objects.bulk_create(
        [
            PeriodicTask(
                name=f"bench-{i}",
                task=TASK,
                crontab=every_minute,
                queue=QUEUE,
                args=json.dumps([i]),
                last_run_at=created,
                enabled=True,
            )
            for i in range(tasks)
        ],
        batch_size=2000,
    )
    PeriodicTasks.update_changed()
    collector = Collector()
    collector.start()
    result: dict = {"tasks": tasks, "tail": tail}
    boundaries = [next_boundary(created.timestamp()) + 60 * k for k in range(minutes)]
    t_stop = boundaries[-1] + tail
    with processes():
        t_start = time.time()
        beat = Process(
            f"beat-{tasks}",
            [
                PYTHON,
                "-m",
                "celery",
                "-A",
                "config",
                "beat",
                "-S",
                "django_celery_beat.schedulers:DatabaseScheduler",
                "--loglevel",
                "WARNING",
                "--pidfile",
                str(LOGS / "beat.pid"),
                "-s",
                str(LOGS / "beat-schedule"),
            ],
            bench_env(SETTINGS),
        )
        time.sleep(2)
        pg = pids_named("postgres")
        beat_cpu0, pg_cpu0, wall0 = cpu_seconds([beat.pid]), cpu_seconds(pg), time.monotonic()
        time.sleep(max(0.0, t_stop - time.time()))
        if beat.popen.poll() is not None:
            raise RuntimeError(f"beat exited:\n{beat.log()[-3000:]}")
        wall = time.monotonic() - wall0
        result["beat_cpu"] = (cpu_seconds([beat.pid]) - beat_cpu0) / wall
        result["pg_cpu"] = (cpu_seconds(pids_named("postgres")) - pg_cpu0) / wall
        t_end = time.time()
        beat.stop()
    collector.stop()
    result["seconds"] = t_end - t_start
    result.update(analyse(collector.seen, created.timestamp(), tasks, boundaries))
    PeriodicTask.objects.all().delete()
    CrontabSchedule.objects.all().delete()
    redis_client().flushdb()
    return result


def main() -> None:
    parser = base_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", help="comma list of task counts (default 1000,10000; --quick 1000)")
    parser.add_argument("--minutes", type=int, help="minute boundaries to observe (default 2; --quick 1)")
    parser.add_argument(
        "--tail",
        help="seconds to keep beat running after the last boundary, one per --tasks entry or one for all "
        "(default 20,45; --quick 20)",
    )
    args = parser.parse_args()
    counts = [int(s) for s in (args.tasks or ("1000" if args.quick else "1000,10000")).split(",")]
    minutes = args.minutes or (1 if args.quick else 2)
    tails = [float(s) for s in (args.tail or ("20" if args.quick else "20,45")).split(",")]
    tails = (tails + tails[-1:] * len(counts))[: len(counts)]
    if not args.no_setup:
        ensure_database(SETTINGS)
    setup_django(SETTINGS)
    results = []
    for tasks, tail in zip(counts, tails, strict=True):
        log(f"beat: {tasks:,} every-minute tasks, {minutes} minute boundaries + {tail:g} s")
        result = run_once(tasks, minutes, tail)
        log(
            f"beat: sent {result['sent']:,} of {result['due_total']:,} due; lateness p50 "
            f"{fmt(result['late_all']['p50'])} s"
        )
        results.append(result)

    rep = Report("Baseline: django-celery-beat DatabaseScheduler", args.md)
    rep.add(
        "N PeriodicTasks on `* * * * *` (crontab, UTC), one `celery beat -S "
        "django_celery_beat.schedulers:DatabaseScheduler` process (defaults), messages taken off Redis on arrival. "
        "Lateness = arrival - the minute boundary the entry was due at (beat's own crontab rule: the first boundary "
        "after its last run). 'skipped' = minute boundaries an entry never fired for because it was more than a "
        "minute late. Beat stops `tail` seconds after the last boundary; 'sent' counts what was sent by then.\n"
    )
    rep.add(
        table(
            [
                "tasks",
                "run (tail)",
                "minute boundaries",
                "due",
                "sent",
                "sent in each boundary's wall minute",
                "lateness p50",
                "p95",
                "p99",
                "max",
                "skipped",
                "beat CPU",
                "postgres CPU",
            ],
            [
                [
                    f"{r['tasks']:,}",
                    f"{r['seconds']:.0f} s ({r['tail']:g} s)",
                    len(r["minutes"]),
                    f"{r['due_total']:,}",
                    f"{r['sent']:,}",
                    ", ".join(f"{m}: {c:,}" for m, c in zip(r["minutes"], r["per_minute"], strict=True)),
                    *(fmt(r["late_all"][k], " s", 1) for k in ("p50", "p95", "p99", "max")),
                    f"{r['skipped']:,}",
                    f"{100 * r['beat_cpu']:.0f}%",
                    f"{100 * r['pg_cpu']:.0f}%",
                ]
                for r in results
            ],
        )
    )
    rep.add("\nLateness of the first send of each entry vs the later ones (seconds):\n")
    rep.add(
        table(
            ["tasks", "sends", "p50", "p95", "p99", "max"],
            [
                [f"{r['tasks']:,}", label] + [fmt(r[key][k], "", 1) for k in ("p50", "p95", "p99", "max")]
                for r in results
                for label, key in (("first", "late_first"), ("later", "late_later"))
            ],
        )
    )
    rep.save()


if __name__ == "__main__":
    main()
