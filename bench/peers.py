"""Peers: Chime, the hand-rolled design and django-celery-beat, N webhooks due at one instant, in one run.

Each design runs with its real processes against the same receiver (bench/receiver.py on
127.0.0.1-127.0.0.10, with its *instant* and *realistic* profiles, bench/profiles.py: log-normal
median 150 ms, p99 2 s, 1 % hanging 12 s past the 10 s timeout), the same N, the same URLs (the
k-th webhook of every design has the same latency draw) and the same worker concurrency:

- **chime**: `manage.py run_scheduler` and one Celery worker (prefork, --concurrency 2), as
  bench/spike.py runs them; N `once` jobs of 20 tenants (timeout 10 s, one attempt).
- **handrolled**: bench/handrolled.py's scan loop and a `bench.shop` Celery worker (prefork,
  --concurrency 2), one task and one `requests.post` per webhook.
- **beat**: `celery beat -S django_celery_beat.schedulers:DatabaseScheduler`, one one-off
  `ClockedSchedule` entry per webhook, and the same shop worker running `shop.post`.

Measured from T: all delivered (the receiver got N distinct webhook-ids), all recorded (the
design wrote N outcomes), fire lag = arrival - scheduled time, duplicates, CPU seconds per run of
PostgreSQL, the workers and the scheduling process (from /proc) and WAL bytes per run, both of
the bench database only (bench/pgcost.py: the server is shared with other sessions).

    python -m bench.peers --quick                       # 5,000 per run, ~7 minutes
    python -m bench.peers --n 20000 --designs chime,handrolled --profiles realistic
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable as `python bench/x.py` too

from bench import handrolled
from bench.common import (
    BENCH_DSN,
    LOGS,
    PYTHON,
    ROOT,
    CpuMeter,
    Process,
    Report,
    _worker_ready,
    base_parser,
    bench_env,
    bench_tenants,
    copy_definitions,
    copy_text_time,
    ensure_database,
    fmt,
    free_port,
    log,
    percentiles,
    pg_connect,
    pids_named,
    processes,
    redis_client,
    reset_state,
    start_scheduler,
    start_worker,
    table,
    utcnow,
    wait_for,
)
from bench.pgcost import BackendCpu, WalCounter, aux_pids, db_stats, relation_bytes
from bench.shop import DONE_KEY

SHOP = "bench.shop.settings"
DESIGNS = ("chime", "handrolled", "beat")
PROFILES = ("instant", "realistic")
HOSTS = 10
TENANTS = 20
TERMINAL = ("succeeded", "failed", "cancelled", "skipped")
# What the design stores per run (beat stores its entries, whatever the runs).
TABLES = {"chime": ("jobs_jobrun", "jobs_runattempt"), "handrolled": ("shop_webhook",), "beat": ()}


class Receiver(Process):
    """bench/receiver.py on 127.0.0.1 .. 127.0.0.HOSTS with its default realistic profile."""

    def __init__(self, name: str = "peers-receiver"):
        self.port = free_port()
        dump = LOGS / f"{name}-deliveries.jsonl"
        args = [PYTHON, "-m", "bench.receiver", "--port", str(self.port), "--dump", str(dump), "--hosts", str(HOSTS)]
        super().__init__(name, args, bench_env())
        wait_for(self._up, 30, "receiver up")

    def url(self, k: int, profile: str) -> str:
        """The k-th webhook's URL: same host, path and latency draw for every design."""
        return f"http://127.0.0.{1 + k % HOSTS}:{self.port}/{profile}/{k}"

    def _get(self, path: str):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=10) as response:
            return json.loads(response.read())

    def _up(self) -> bool:
        if self.popen.poll() is not None:
            raise RuntimeError(f"receiver exited:\n{self.log()[-3000:]}")
        try:
            return self.count() >= 0
        except OSError:
            return False

    def count(self) -> int:
        return int(self._get("/_count")["count"])

    def records(self) -> list[list]:
        """[(arrival unix time, webhook-id, scheduled-for)]."""
        return self._get("/_records")


def shop_admin(*args: str, stdin: str | None = None) -> None:
    subprocess.run([PYTHON, "-m", "bench.shop.admin", *args], cwd=ROOT, env=bench_env(SHOP), input=stdin,
                   text=True, check=True)  # fmt: skip


def start_shop_worker() -> Process:
    args = [
        PYTHON, "-m", "celery", "-A", "bench.shop.tasks", "worker", "-Q", "shop", "--pool", "prefork",
        "--concurrency", "2", "--loglevel", "WARNING", "--without-gossip", "--without-mingle",
        "--without-heartbeat", "-n", "shop@%h",
    ]  # fmt: skip
    worker = Process("shop-worker", args, bench_env(SHOP))
    wait_for(lambda: len(worker.group_pids()) >= 3 and _worker_ready(worker), 60, "shop worker ready")
    return worker


def start_beat() -> Process:
    (LOGS / "peers-beat.pid").unlink(missing_ok=True)
    args = [
        PYTHON, "-m", "celery", "-A", "bench.shop.tasks", "beat", "-S",
        "django_celery_beat.schedulers:DatabaseScheduler", "--loglevel", "WARNING",
        "--pidfile", str(LOGS / "peers-beat.pid"), "-s", str(LOGS / "peers-beat-schedule"),
    ]  # fmt: skip
    return Process("peers-beat", args, bench_env(SHOP))


def load_chime(receiver: Receiver, *, n: int, profile: str, fire_at: datetime, tenants: list) -> float:
    """N once jobs (COPY of a job_create() row), then each row's own URL, 10 s timeout, 1 attempt.
    Returns the bytes per definition as loaded (before that UPDATE leaves a dead version of each row)."""
    text = copy_text_time(fire_at)
    copy_definitions(
        tenant=tenants[0], tenants=tenants, target_url=receiver.url(0, profile),
        fire_texts=(text for _ in range(n)), count=n, name_prefix="peer",
    )  # fmt: skip
    with pg_connect() as conn:
        per_definition = relation_bytes(conn, ("jobs_jobdefinition",)) / n
        conn.execute(
            "UPDATE jobs_jobdefinition SET timeout_seconds = 10, retry_max_attempts = 1, target_url = "
            "format('http://127.0.0.%%s:%%s/%%s/%%s', 1 + split_part(name, '-', 2)::int %% %s, %s::int, %s::text, "
            "split_part(name, '-', 2))",
            [HOSTS, receiver.port, profile],
        )
        conn.execute("VACUUM ANALYZE jobs_jobdefinition")
    return per_definition


def run_once(
    design: str, profile: str, *, n: int, deadline: float, lead: float, tenants: list, worker_settings: str = ""
) -> dict:
    reset_state()
    with pg_connect() as conn:
        handrolled.clear(conn)
    shop_admin("beat-clear")
    result: dict = {"design": design, "profile": profile, "n": n, "deadline": deadline}
    with processes():
        receiver = Receiver()
        if design == "chime":
            extra = {"DJANGO_SETTINGS_MODULE": worker_settings} if worker_settings else {}
            workers = start_worker(concurrency=2, **extra)
            scheduler = start_scheduler("peers-scheduler")
        else:
            workers = start_shop_worker()
            scheduler = None
            if design == "handrolled":
                scheduler = Process("shop-scan", [PYTHON, "-m", "bench.handrolled"], bench_env(SHOP))
                scheduler.wait_for_log("scan started", timeout=60)
        fire_at = (utcnow() + timedelta(seconds=lead + n / 5_000)).replace(microsecond=0)
        log(f"peers: {design}/{profile}: loading {n:,} webhooks due at {fire_at:%H:%M:%S}")
        if design == "chime":
            result["definition_bytes"] = load_chime(receiver, n=n, profile=profile, fire_at=fire_at, tenants=tenants)
        elif design == "handrolled":
            with pg_connect() as conn:
                handrolled.load(conn, urls=[receiver.url(k, profile) for k in range(n)], fire_at=fire_at)
        else:
            spec = {"fire_at": fire_at.isoformat(), "urls": [receiver.url(k, profile) for k in range(n)]}
            shop_admin("beat-load", stdin=json.dumps(spec))
            scheduler = start_beat()
        t_fire = fire_at.timestamp()
        if time.time() > t_fire - 5:
            raise RuntimeError("the load took too long; raise --lead")
        meter = CpuMeter(
            {
                "postgres (all)": lambda: pids_named("postgres"),
                "postgres aux": aux_pids,
                "workers": workers.group_pids,
                "scheduler": lambda: [scheduler.pid],
                "receiver": lambda: [receiver.pid],
                "redis": lambda: pids_named("redis-server"),
            }
        )
        with pg_connect() as conn:
            backends = BackendCpu(BENCH_DSN)
            time.sleep(max(0.0, t_fire - time.time()))
            wal = WalCounter(conn)
            stats0 = db_stats(conn)
            meter.start()
            backends.start()
            wal.start()
            reached: dict[str, float] = {}
            while time.time() < t_fire + deadline:
                time.sleep(0.5)
                wal.poll()
                now = time.time() - t_fire
                if receiver.count() >= n:
                    reached.setdefault("received", now)
                done = finished(design, conn)
                if done >= n:
                    reached["recorded"] = now
                    break
            backend_seconds = backends.stop()
            wal.poll()
            meter.stop()
            result["done"] = finished(design, conn)
            time.sleep(1.1)  # PostgreSQL flushes its per-database counters about once a second
            stats1 = db_stats(conn)
            result["db_stats"] = {k: stats1[k] - stats0[k] for k in stats0}
            result["table_bytes"] = relation_bytes(conn, TABLES[design]) if TABLES[design] else None
            result.update(wal=wal.totals, wal_all=wal.server_bytes, wal_lost_ranges=wal.lost_ranges)
        result.update(cpu=meter.used, wall=meter.wall, reached=reached)
        result["cpu"]["postgres (this db)"] = backend_seconds
        # The WAL writer, checkpointer and bgwriter serve every database: this one's share of the WAL.
        share = result["wal"]["bytes"] / result["wal_all"] if result["wal_all"] else 0.0
        result["cpu"]["postgres aux (share)"] = result["cpu"]["postgres aux"] * min(1.0, share)
        records = receiver.records()
        if scheduler is not None:
            scheduler.stop()
        workers.stop()
        receiver.stop()
    result.update(from_records(records, t_fire=t_fire, n=n, deadline=deadline))
    return result


def finished(design: str, conn) -> int:
    """Outcomes the design has written (beat records none: its task counts in Redis)."""
    if design == "chime":
        return conn.execute("SELECT count(*) FROM jobs_jobrun WHERE status = ANY(%s)", [list(TERMINAL)]).fetchone()[0]
    if design == "handrolled":
        return handrolled.finished(conn)
    return int(redis_client().get(DONE_KEY) or 0)


def from_records(records: list[list], *, t_fire: float, n: int, deadline: float) -> dict:
    """Delivery times, lag and duplicates; a run not delivered by the deadline counts as lag >= deadline."""
    first: dict[str, float] = {}
    for arrival, webhook_id, _scheduled in records:
        if webhook_id not in first or arrival < first[webhook_id]:
            first[webhook_id] = arrival
    lags = sorted(arrival - t_fire for arrival in first.values())
    delivered = len(lags)
    out = {"received": len(records), "delivered": delivered, "duplicates": len(records) - delivered}
    out["t_delivered"] = lags[n - 1] if delivered >= n else None
    padded = lags + [deadline] * max(0, n - delivered)
    out["lag"] = percentiles(padded)
    out["lag_censored"] = {k: v is not None and v >= deadline and delivered < n for k, v in out["lag"].items()}
    span = out["t_delivered"] or (lags[-1] if lags else None)
    out["rate"] = (min(delivered, n) / span) if span else None
    return out


PG = "postgres (this db)"


def runs_of(r: dict) -> int:
    return max(1, min(r["delivered"], r["n"]))


def ms_per_run(r: dict, group: str) -> float | None:
    return 1000 * r["cpu"][group] / runs_of(r) if r["delivered"] else None


def wal_per_run(r: dict) -> float | None:
    return r["wal"]["bytes"] / runs_of(r) if r["delivered"] else None


def ratio(value, base) -> str:
    return f"{value / base:.2f}x" if value and base else "—"


MAIN_HEADERS = [
    "design", "receiver", "N", "delivered", "all delivered", "runs/s", "x chime", "all recorded", "fire lag p50",
    "p99", "dup.", "PostgreSQL CPU/run", "x chime", "workers CPU/run", "x chime", "scheduler CPU/run",
    "WAL/run", "x chime",
]  # fmt: skip
RAW_HEADERS = [
    "design", "receiver", "wall", "postgres (this db)", "postgres (all sessions)", "workers", "scheduler",
    "receiver", "redis", "postgres aux (WAL share)", "WAL (this db)", "WAL (whole server)", "WAL records/run",
    "of it full-page images",
    "commits/run", "rows inserted + updated/run", "connections opened/run", "run tables/run",
]  # fmt: skip


def label(r: dict) -> str:
    return r["design"] + (f" (round {r['round']})" if r.get("rounds", 1) > 1 else "")


def main_row(r: dict, chime: dict | None) -> list:
    lag, cens = r["lag"], r["lag_censored"]
    delivered = f"{min(r['delivered'], r['n']):,}" + ("" if r["delivered"] >= r["n"] else f" by {r['deadline']:g} s")
    per = {g: ms_per_run(r, g) for g in (PG, "workers", "scheduler")}
    base = {g: chime and ms_per_run(chime, g) for g in (PG, "workers")}
    return [
        label(r), r["profile"], f"{r['n']:,}", delivered, fmt(r["t_delivered"], " s", 1), fmt(r["rate"], "/s", 0),
        ratio(r["rate"], chime and chime["rate"]), fmt(r["reached"].get("recorded"), " s", 1),
        ("≥ " if cens["p50"] else "") + fmt(lag["p50"], " s"), ("≥ " if cens["p99"] else "") + fmt(lag["p99"], " s"),
        f"{r['duplicates']:,}", fmt(per[PG], " ms"), ratio(per[PG], base[PG]), fmt(per["workers"], " ms"),
        ratio(per["workers"], base["workers"]), fmt(per["scheduler"], " ms"), fmt(wal_per_run(r), " B", 0),
        ratio(wal_per_run(r), chime and wal_per_run(chime)),
    ]  # fmt: skip


def raw_row(r: dict) -> list:
    cpu, wal, runs = r["cpu"], r["wal"], runs_of(r)
    return [
        label(r), r["profile"], fmt(r["wall"], " s", 1),
        *(fmt(cpu[g], " s", 1) for g in (PG, "postgres (all)", "workers", "scheduler", "receiver", "redis")),
        fmt(cpu.get("postgres aux (share)"), " s", 2),
        fmt(wal["bytes"] / 1e6, " MB", 1), fmt(r["wal_all"] / 1e6, " MB", 1), fmt(wal["records"] / runs, "", 1),
        f"{100 * wal['fpi_bytes'] / max(1, wal['bytes']):.0f} %",
        fmt(r["db_stats"]["xact_commit"] / runs, "", 2),
        fmt((r["db_stats"]["tup_inserted"] + r["db_stats"]["tup_updated"]) / runs, "", 1),
        fmt(r["db_stats"].get("sessions", 0) / runs, "", 3),
        fmt(r["table_bytes"] / r["n"], " B", 0) if r["table_bytes"] else "—",
    ]  # fmt: skip


def report(results: list[dict], rep: Report) -> None:
    order = {name: k for k, name in enumerate(DESIGNS)}
    results = sorted(results, key=lambda r: (r.get("round", 1), r["profile"] != "instant", order[r["design"]]))
    chime_of = {(r["profile"], r.get("round", 1)): r for r in results if r["design"] == "chime"}
    rep.add(
        "N webhooks due at the same second T; each design with its own processes, the same receiver URLs "
        f"(127.0.0.1-{HOSTS}) and worker concurrency 2 (prefork). runs/s = delivered / time of the last first "
        "delivery (or of the last one by the deadline); 'x chime' = this design / Chime in the same run and "
        "receiver profile. Per delivered run: CPU of the bench database's PostgreSQL backends, of the worker "
        "processes and of the scheduling process (Chime's scheduler, the scan loop, beat), from /proc; WAL "
        "records of the bench database (pg_walinspect). '≥': runs not delivered by the deadline are counted at "
        "the deadline.\n"
    )
    rep.add(table(MAIN_HEADERS, [main_row(r, chime_of.get((r["profile"], r.get("round", 1)))) for r in results]))
    rep.add(
        "\nRaw, from T to the end of each run: CPU seconds; 'all sessions' includes every other session's use "
        "of the shared server; WAL of this database and of the whole server:\n"
    )
    rep.add(table(RAW_HEADERS, [raw_row(r) for r in results]))
    lost = {f"{r['design']}/{r['profile']}": r["wal_lost_ranges"] for r in results if r.get("wal_lost_ranges")}
    if lost:
        rep.add(f"\nWAL ranges recycled before they were read (this database's WAL is undercounted there): {lost}")


def main() -> None:
    parser = base_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, help="webhooks due at once per run (default 20,000; --quick 5,000)")
    parser.add_argument("--designs", default=",".join(DESIGNS), help="comma list of chime,handrolled,beat")
    parser.add_argument("--profiles", default=",".join(PROFILES), help="comma list of instant,realistic")
    parser.add_argument("--deadline", help="seconds after T: INSTANT,REALISTIC (default 90,120; --quick 40,60)")
    parser.add_argument("--lead", type=float, default=12.0, help="seconds from the start of the load to T")
    parser.add_argument("--rounds", type=int, default=1, help="repeat everything, the design order rotated")
    parser.add_argument(
        "--chime-worker-settings", default="", help="DJANGO_SETTINGS_MODULE of Chime's worker (bench.reuse_settings)"
    )
    parser.add_argument("--json", metavar="FILE", help="also write the raw results as JSON")
    args = parser.parse_args()
    n = args.n or (5_000 if args.quick else 20_000)
    deadlines = [float(s) for s in (args.deadline or ("40,60" if args.quick else "90,120")).split(",")]
    deadline_of = dict(zip(PROFILES, (deadlines + deadlines[-1:])[:2], strict=True))
    if not args.no_setup:
        ensure_database("bench.beat_settings")
    shop_admin("setup")
    tenants = bench_tenants(TENANTS)
    results = []
    designs = args.designs.split(",")
    for round_ in range(1, args.rounds + 1):
        for profile in args.profiles.split(","):
            # The machine is shared: rotate the order each round so no design always runs at the same time.
            shift = (round_ - 1) % len(designs)
            for design in designs[shift:] + designs[:shift]:
                result = run_once(
                    design, profile, n=n, deadline=deadline_of[profile], lead=args.lead, tenants=tenants,
                    worker_settings=args.chime_worker_settings,
                )  # fmt: skip
                log(
                    f"peers: {design}/{profile}: delivered {result['delivered']:,} "
                    f"(all at {fmt(result['t_delivered'])} s), "
                    f"{fmt(result['rate'], '/s', 0)}, lag p50 {fmt(result['lag']['p50'])} s, "
                    f"postgres {fmt(ms_per_run(result, PG))} ms/run"
                )
                result.update(round=round_, rounds=args.rounds)
                results.append(result)
    reset_state()
    rep = Report("Peers: Chime, a hand-rolled scan + Celery, django-celery-beat", args.md)
    report(results, rep)
    rep.save()
    if args.json:
        Path(args.json).write_text(json.dumps(results, default=str, indent=1))


if __name__ == "__main__":
    main()
