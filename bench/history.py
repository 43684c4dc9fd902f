"""History: the API, the dashboard, the spike and a prune with 10M runs in the tables, next to an empty history.

One run of the bench measures both sides: the jobs (bench/history_load.py: 26,720 cron jobs at
10M runs, several tenants) are loaded first and everything is measured with no run in the tables
(EMPTY); then ~40 days of their runs and attempts are COPYed in (timed) and the same is measured
again (HISTORY); the ratio column is HISTORY / EMPTY. Then the disk per million runs and the prune
of the oldest day (a batched DELETE of its terminal runs and their attempts, 5,000 runs per
transaction, tenant by tenant; dead letters stay).

Requests go through the Procfile's `web` line (uvicorn, production settings, DEBUG=false; started
as bench/create.py does), one at a time on a keep-alive connection, with the proxy's
X-Forwarded-Proto: https: the API with an API key of the first tenant (the one with half the
runs), the dashboard with a session of its owner who logged in through the login form. Deep
cursors: the 50th page reached by following `next`, and a cursor at 20 days back (DRF's cursor
for an id of that time). The spike is bench/spike.py's (1 scheduler, 2 worker processes, its jobs
spread over 100 tenants), on top of the history. Goal (issue #14): no API or page p99 above
100 ms, the spike within 10 % of its empty-table time.

    .venv/bin/python -m bench.history                                   # 10M runs, 100k spike
    .venv/bin/python -m bench.history --runs 200000 --spike-runs 5000   # a bounded form
"""

from __future__ import annotations

import base64
import http.client
import os
import re
import sys
import time
import urllib.parse
import uuid
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable as `python bench/x.py` too

from bench import history_load
from bench.common import (
    LOGS,
    Report,
    base_parser,
    bench_tenant,
    bench_tenants,
    ensure_database,
    fmt,
    log,
    percentiles,
    pg_connect,
    processes,
    reset_state,
    setup_django,
    table,
    utcnow,
)

# Where apps/history's prune_tenant (when this tree has it) writes its archives.
os.environ.setdefault("CHIME_ARCHIVE_DIR", str(LOGS / "history-archive"))
PROXY = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.7"}
USER, PASSWORD = "history-bench@example.com", "history-bench-password-1"
GOAL_MS = 100.0
MIN_SAMPLES = 20
TERMINAL = ("succeeded", "cancelled", "skipped")  # what a prune removes: dead letters (failed) stay


class Client:
    """Sequential requests on one keep-alive connection; cookies kept by hand (the session cookie
    is Secure: the bench speaks http to uvicorn as the TLS proxy in front of production does)."""

    def __init__(self, url: str, headers: dict | None = None):
        parsed = urllib.parse.urlparse(url)
        self.host, self.port = parsed.hostname, parsed.port
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        self.headers = {**PROXY, **(headers or {})}
        self.cookies: dict[str, str] = {}

    def request(self, method: str, path: str, body: str | None = None, headers: dict | None = None):
        sent = {**self.headers, **(headers or {})}
        if self.cookies:
            sent["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        try:
            t0 = time.perf_counter()
            self.conn.request(method, path, body=body, headers=sent)
            response = self.conn.getresponse()
        except (http.client.RemoteDisconnected, ConnectionError):
            # uvicorn closes a connection idle for 5 s (while the other client was measured):
            # reconnect; only warm-up requests come after an idle time.
            self.conn.close()
            t0 = time.perf_counter()
            self.conn.request(method, path, body=body, headers=sent)
            response = self.conn.getresponse()
        data = response.read()
        elapsed = time.perf_counter() - t0
        for header in response.headers.get_all("Set-Cookie") or []:
            name, _, rest = header.partition("=")
            self.cookies[name.strip()] = rest.split(";", 1)[0]
        return response.status, data, elapsed, response

    def login(self) -> None:
        status, _, _, _ = self.request("GET", "/login/")
        assert status == 200 and "csrftoken" in self.cookies, f"login page: {status}"
        origin = f"https://{self.host}:{self.port}"
        form = urllib.parse.urlencode(
            {"csrfmiddlewaretoken": self.cookies["csrftoken"], "username": USER, "password": PASSWORD}
        )
        headers = {"Content-Type": "application/x-www-form-urlencoded", "Origin": origin, "Referer": origin + "/login/"}
        status, body, _, _ = self.request("POST", "/login/", form, headers)
        assert status == 302 and "sessionid" in self.cookies, f"login refused: {status} {body[:300]!r}"


def prepare(*, runs: int, tenant_count: int, days: int, target_url: str) -> dict:
    """Empty tables; the history's tenants, jobs, an API key and a logged-in-able owner of the first."""
    setup_django()
    from django.contrib.auth import get_user_model

    from apps.tenants.models import Membership, Role, TenantLimits
    from apps.tenants.services import api_key_create

    reset_state()
    tenants = [bench_tenant(f"history-{i:02d}") for i in range(tenant_count)]
    main = tenants[0]
    TenantLimits.objects.update_or_create(tenant=main, defaults={"api_rate_limit": "10000000/min"})
    user = get_user_model().objects.filter(username=USER).first()
    if user is None:
        user = get_user_model().objects.create_user(username=USER, email=USER, password=PASSWORD)
    Membership.objects.get_or_create(user=user, tenant=main, defaults={"role": Role.OWNER})
    jobs, seconds = history_load.load_jobs(tenants=tenants, runs=runs * 40 // days, target_url=target_url)
    mine = [j for j in jobs if j["tenant"] == main.id.hex]
    return {
        "tenants": tenants,
        "jobs": jobs,
        "jobs_seconds": seconds,
        "key": api_key_create(tenant=main, name="history bench").raw_key,
        "busy": next(j for j in mine if j["period"] == 1),
        "daily": next(j for j in mine if j["period"] == history_load.DAY_MINUTES),
    }


def reuse(*, tenant_count: int) -> dict:
    """The context of a history kept by an earlier --keep run (its tenants, jobs and a new key)."""
    setup_django()
    from apps.tenants.services import api_key_create

    tenants = [bench_tenant(f"history-{i:02d}") for i in range(tenant_count)]
    with pg_connect() as conn:
        rows = conn.execute(
            "SELECT id, tenant_id, cron_expression FROM jobs_jobdefinition WHERE name LIKE 'history-%%'"
        ).fetchall()
    main = tenants[0].id
    jobs = [{"dashed": str(i), "tenant": t.hex, "cron": c} for i, t, c in rows]
    mine = [j for j in jobs if j["tenant"] == main.hex]
    daily = re.compile(r"^\d+ \d+ \* \* \*$")
    return {
        "tenants": tenants,
        "jobs": jobs,
        "jobs_seconds": 0.0,
        "key": api_key_create(tenant=tenants[0], name="history bench").raw_key,
        "busy": next(j for j in mine if j["cron"] == "* * * * *"),
        "daily": next(j for j in mine if daily.match(j["cron"])),
    }


def cursor_at(when) -> str:
    """DRF's cursor (position = an id, newest first: the next page holds ids below it) for the
    newest UUIDv7 of the millisecond `when`."""
    ms = int(when.timestamp() * 1000)
    position = uuid.UUID(bytes=((ms << 16) | 0x7FFF).to_bytes(8, "big") + b"\xbf" + b"\xff" * 7)
    query = urllib.parse.urlencode({"p": str(position)})
    return urllib.parse.quote(base64.b64encode(query.encode()).decode())


def follow(client: Client, path: str, pages: int) -> tuple[str | None, list[float]]:
    """Follow `next` from `path` for `pages` pages: the path of the last one (None if the list
    ended before) and the latency of each page on the way."""
    times = []
    for _ in range(pages):
        status, body, elapsed, _ = client.request("GET", path)
        assert status == 200, f"{path}: {status} {body[:200]!r}"
        times.append(elapsed)
        link = re.search(rb'"next":"([^"]+)"', body)
        if not link:
            return None, times
        parsed = urllib.parse.urlparse(link.group(1).decode())
        path = f"{parsed.path}?{parsed.query}"
    return path, times


def targets(ctx: dict) -> list[tuple[str, str, str]]:
    """(label, api|page, path) of every timed request."""
    busy, daily = ctx["busy"]["dashed"], ctx["daily"]["dashed"]
    back = cursor_at(utcnow() - timedelta(days=20))
    return [
        ("API GET /runs, first page", "api", "/api/v1/runs"),
        ("API GET /runs, 50 pages deep (following next)", "api", "deep:/api/v1/runs"),
        ("API GET /runs, cursor 20 days back", "api", f"/api/v1/runs?cursor={back}"),
        ("API GET /runs?status=failed (dead letters)", "api", "/api/v1/runs?status=failed"),
        ("API GET /jobs/{id}/runs, every-minute job, first page", "api", f"/api/v1/jobs/{busy}/runs"),
        ("API GET /jobs/{id}/runs, every-minute job, 50 pages deep", "api", f"deep:/api/v1/jobs/{busy}/runs"),
        ("API GET /jobs/{id}/runs, every-minute job, 20 days back", "api", f"/api/v1/jobs/{busy}/runs?cursor={back}"),
        ("API GET /jobs/{id}/runs, daily job, first page", "api", f"/api/v1/jobs/{daily}/runs"),
        ("page /runs/", "page", "/runs/"),
        ("page /runs/?page=20", "page", "/runs/?page=20"),
        ("page /runs/?status=failed", "page", "/runs/?status=failed"),
        ("page /dead-letters/", "page", "/dead-letters/"),
        ("page /jobs/ (the tenant's jobs with their last run)", "page", "/jobs/"),
        ("page /jobs/{id}/, every-minute job", "page", f"/jobs/{busy}/"),
        ("page /jobs/{id}/, daily job", "page", f"/jobs/{daily}/"),
    ]


def measure_web(ctx: dict, *, requests: int, side: str, budget: float) -> dict[str, dict]:
    """Every target `requests` times (after 3 warm-up requests) through a fresh web process, or
    fewer (at least MIN_SAMPLES) once a target has taken `budget` seconds."""
    from bench.create import start_web

    out: dict[str, dict] = {}
    with processes():
        web, url = start_web()
        api = Client(url, {"Authorization": f"Bearer {ctx['key']}"})
        page = Client(url)
        page.login()
        for label, kind, path in targets(ctx):
            client = api if kind == "api" else page
            walk = None
            if path.startswith("deep:"):
                path, walk = follow(client, path[5:], 50)
                if path is None:
                    out[label] = {"note": f"fewer than 50 pages ({len(walk)})"}
                    continue
            latencies = []
            began = time.perf_counter()
            for i in range(3 + requests):
                status, body, elapsed, _ = client.request("GET", path)
                assert status == 200, f"{side} {label}: {status} {body[:300]!r}"
                if i >= 3:
                    latencies.append(elapsed)
                if len(latencies) >= MIN_SAMPLES and time.perf_counter() - began > budget:
                    break  # a slow page: its p99 is then about its maximum (the n column says)
            out[label] = {"lat": percentiles(latencies), "bytes": len(body), "n": len(latencies)}
            if walk:
                out[label]["walk"] = percentiles(walk)
            log(
                f"history: {side}: {label}: p50 {1000 * out[label]['lat']['p50']:.1f} ms, "
                f"p99 {1000 * out[label]['lat']['p99']:.1f} ms"
            )
        web.stop()
    return out


def spike(n: int, *, lead: float, deadline: float) -> dict:
    from bench.spike import run_once

    return run_once(
        n=n,
        schedulers=1,
        tenants=bench_tenants(100),
        lookahead=None,
        lead=lead,
        deadline=deadline,
        workers=2,
        keep_history=True,
    )


def disk(runs: int) -> list[list[str]]:
    rows = []
    with pg_connect() as conn:
        total = [0, 0, 0]
        for name in history_load.TABLES:
            heap, indexes, whole = conn.execute(
                "SELECT pg_relation_size(%s::regclass), pg_indexes_size(%s::regclass), "
                "pg_total_relation_size(%s::regclass)",
                [name, name, name],
            ).fetchone()
            sizes = [heap, indexes, whole]
            total = [a + b for a, b in zip(total, sizes, strict=True)]
            rows.append([name, *sizes])
        rows.append(["both", *total])
    mib = 1024 * 1024
    return [[r[0], *(fmt(v / mib, " MiB", 0) for v in r[1:]), fmt(r[3] / mib / (runs / 1e6), " MiB", 0)] for r in rows]


def prune_day(tenants: list, day_start, batch: int = 5000) -> dict:
    """The oldest day's terminal runs and their attempts, `batch` runs per transaction, tenant by
    tenant (jobrun_tenant_created_idx finds them); the same SQL as a prune_tenant would send."""
    day_end = day_start + timedelta(days=1)
    out = {"runs": 0, "attempts": 0, "batches": [], "day": day_start.date().isoformat()}
    t0 = time.perf_counter()
    with pg_connect(autocommit=False) as conn:
        for tenant in tenants:
            while True:
                b0 = time.perf_counter()
                ids = [
                    row[0]
                    for row in conn.execute(
                        "SELECT id FROM jobs_jobrun WHERE tenant_id = %s AND created_at >= %s AND created_at < %s "
                        "AND status = ANY(%s) LIMIT %s",
                        [tenant.id, day_start, day_end, list(TERMINAL), batch],
                    ).fetchall()
                ]
                if not ids:
                    conn.rollback()
                    break
                out["attempts"] += conn.execute("DELETE FROM jobs_runattempt WHERE run_id = ANY(%s)", [ids]).rowcount
                out["runs"] += conn.execute("DELETE FROM jobs_jobrun WHERE id = ANY(%s)", [ids]).rowcount
                conn.commit()
                out["batches"].append(time.perf_counter() - b0)
    out["seconds"] = time.perf_counter() - t0
    return out


def prune(tenants: list, day_start) -> dict:
    """The app's prune_tenant (apps/history, archive then delete) when this tree has it, with
    `now` put where the tenant's retention cutoff is the end of the oldest day; else prune_day."""
    try:
        from apps.history.services import cutoffs, prune_tenant
    except ImportError:
        out = prune_day(tenants, day_start)
        out["how"] = "batched SQL, 5,000 runs per transaction"
        return out
    day_end = day_start + timedelta(days=1)
    out = {"runs": 0, "attempts": 0, "batches": [], "day": day_start.date().isoformat()}
    t0 = time.perf_counter()
    for tenant in tenants:
        now = utcnow()
        now = day_end + (now - cutoffs(tenant=tenant, now=now)[0])  # runs cutoff = the day's end
        b0 = time.perf_counter()
        result = prune_tenant(tenant=tenant, now=now)
        out["runs"] += result.runs
        out["attempts"] += result.attempts
        out["batches"] += [(time.perf_counter() - b0) / max(result.batches, 1)] * result.batches
    out["seconds"] = time.perf_counter() - t0
    out["how"] = "apps.history prune_tenant: archive then delete; per-transaction times are per-tenant means"
    return out


def _ms(stats: dict | None, key: str) -> str:
    return fmt(1000 * stats[key], " ms", 1) if stats and stats.get(key) is not None else "—"


def report(rep: Report, ctx: dict, load: dict, empty: dict, full: dict, spikes: dict, pruned: dict | None, sizes):
    runs = load["runs"]
    rep.add(
        f"{len(ctx['tenants'])} tenants, {len(ctx['jobs']):,} cron jobs; {runs:,} runs and {load['attempts']:,} "
        f"attempts over {load['minutes'] / 1440:.1f} days (from {load['window_start']:%Y-%m-%d}). The first "
        "tenant (half the jobs) is the one measured. Latencies: one request at a time through the Procfile's "
        "web line (uvicorn, production settings), the client's wall time. Ratio = history p99 / empty p99 "
        f"(the deep cursors on the empty side: no second page, shown —). Goal: p99 <= {GOAL_MS:g} ms, spike "
        "within 10 %.\n"
    )
    rep.add(
        table(
            ["load", "rows", "COPY (2 processes)", "index + constraint rebuild", "VACUUM ANALYZE", "total", "runs/s"],
            [
                [
                    f"{len(ctx['jobs']):,} jobs",
                    f"{len(ctx['jobs']):,}",
                    fmt(ctx["jobs_seconds"], " s", 1),
                    "—",
                    "—",
                    fmt(ctx["jobs_seconds"], " s", 1),
                    "—",
                ],
                [
                    "runs + attempts",
                    f"{runs:,} + {load['attempts']:,}",
                    fmt(load["copy_seconds"], " s", 0),
                    fmt(load["index_seconds"], " s", 0),
                    fmt(load["vacuum_seconds"], " s", 0),
                    fmt(load["total_seconds"], " s", 0),
                    fmt(runs / load["total_seconds"], "", 0),
                ],
            ],
        )
    )
    rows = []
    for label, _kind, _path in targets(ctx):
        e, h = empty.get(label, {}), full.get(label, {})
        e_p99, h_p99 = (e.get("lat") or {}).get("p99"), (h.get("lat") or {}).get("p99")
        ratio = fmt(h_p99 / e_p99, "x") if e_p99 and h_p99 else "—"
        ok = "—" if h_p99 is None else ("yes" if 1000 * h_p99 <= GOAL_MS else "**no**")
        rows.append(
            [
                label,
                _ms(e.get("lat"), "p50"),
                _ms(e.get("lat"), "p99"),
                _ms(h.get("lat"), "p50"),
                _ms(h.get("lat"), "p99"),
                ratio,
                ok,
                f"{e.get('n', '—')} / {h.get('n', '—')}",
                h.get("note", ""),
            ]
        )
    rep.add("")
    rep.add(
        table(
            [
                "request",
                "empty p50",
                "empty p99",
                "history p50",
                "history p99",
                "p99 ratio",
                "<= 100 ms",
                "n (empty / history)",
                "",
            ],
            rows,
        )
    )
    rep.add("")
    if spikes:
        _spike_table(rep, spikes)
    rep.add(table(["table", "heap", "indexes", "total (with TOAST)", "total per 1M runs"], sizes))
    _prune_table(rep, pruned)


def _spike_table(rep: Report, spikes: dict) -> None:
    spike_rows = []
    for key in ("t_materialized", "t_enqueued", "t_delivered"):
        e, h = spikes["empty"].get(key), spikes["history"].get(key)
        spike_rows.append(
            [
                f"spike of {spikes['empty']['n']:,}: all {key[2:]}",
                fmt(e, " s"),
                fmt(h, " s"),
                fmt(h / e, "x") if e and h else "—",
            ]
        )
    e, h = spikes["empty"]["lag"]["p99"], spikes["history"]["lag"]["p99"]
    spike_rows.append(["fire lag p99", fmt(e, " s"), fmt(h, " s"), fmt(h / e, "x") if e and h else "—"])
    rep.add(table(["spike (1 scheduler, 2 worker processes, 100 tenants)", "empty", "history", "ratio"], spike_rows))
    rep.add("")


def _prune_table(rep: Report, pruned: dict) -> None:
    if pruned:
        rep.add("")
        batches = percentiles(pruned["batches"])
        rep.add(
            table(
                [
                    "prune of one day",
                    "runs deleted",
                    "attempts deleted",
                    "transactions",
                    "wall",
                    "runs/s",
                    "transaction p50",
                    "max",
                ],
                [
                    [
                        pruned["day"] + f" ({pruned['how']})",
                        f"{pruned['runs']:,}",
                        f"{pruned['attempts']:,}",
                        f"{len(pruned['batches']):,}",
                        fmt(pruned["seconds"], " s", 1),
                        fmt(pruned["runs"] / pruned["seconds"], "", 0) if pruned["seconds"] else "—",
                        _ms(batches, "p50"),
                        _ms(batches, "max"),
                    ]
                ],
            )
        )


def remeasure(args, *, requests: int, spike_runs: int, lead: float, deadline: float) -> None:
    """--reuse: the history side only (requests, spike), on the history an earlier --keep left."""
    ctx = reuse(tenant_count=args.tenants)
    full = measure_web(ctx, requests=requests, side="history", budget=args.target_seconds)
    rep = Report("History (re-measured on a kept history): API and dashboard", args.md)
    rows = []
    for label, _kind, _path in targets(ctx):
        h = full.get(label, {})
        ok = "—" if not h.get("lat") else ("yes" if 1000 * h["lat"]["p99"] <= GOAL_MS else "**no**")
        rows.append([label, _ms(h.get("lat"), "p50"), _ms(h.get("lat"), "p99"), ok, h.get("n", "—"), h.get("note", "")])
    with pg_connect() as conn:
        runs = conn.execute("SELECT count(*) FROM jobs_jobrun").fetchone()[0]
    rep.add(f"{runs:,} runs in the tables; {len(ctx['jobs']):,} jobs.\n")
    rep.add(table(["request", "history p50", "history p99", "<= 100 ms", "n", ""], rows))
    if spike_runs:
        result = spike(spike_runs, lead=lead, deadline=deadline)
        from bench.spike import clear_tenants

        clear_tenants([str(t.id) for t in bench_tenants(100)])
        rep.add("")
        rep.add(
            table(
                ["spike on the history", "all materialized", "all enqueued", "all delivered", "fire lag p99"],
                [
                    [f"{spike_runs:,}"]
                    + [fmt(result.get(k), " s") for k in ("t_materialized", "t_enqueued", "t_delivered")]
                    + [fmt(result["lag"]["p99"], " s")]
                ],
            )
        )
    load_avg = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    rep.add(f"\nLoad average at the end: {load_avg}.")
    rep.save()


def main() -> None:
    parser = base_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, help="runs to load (default 10,000,000; --quick 200,000)")
    parser.add_argument("--spike-runs", type=int, help="spike size (default 100,000; --quick 5,000; 0: none)")
    parser.add_argument("--tenants", type=int, default=8, help="tenants of the history (default 8)")
    parser.add_argument("--days", type=int, default=40, help="days of history before today (default 40)")
    parser.add_argument("--requests", type=int, help="timed requests per target and side (default 200; --quick 30)")
    parser.add_argument(
        "--target-seconds", type=float, default=30.0, help="time per request target and side, after 20 (default 30)"
    )
    parser.add_argument("--load-processes", type=int, default=2, help="COPY processes (default 2)")
    parser.add_argument("--keep", action="store_true", help="keep the loaded history (to EXPLAIN its queries)")
    parser.add_argument("--reuse", action="store_true", help="measure the history side again on a kept history")
    args = parser.parse_args()
    runs = args.runs or (200_000 if args.quick else 10_000_000)
    spike_runs = args.spike_runs if args.spike_runs is not None else (5_000 if args.quick else 100_000)
    requests = args.requests or (30 if args.quick else 200)
    lead, deadline = (5.0, 60.0) if spike_runs <= 1_000 else (10.0, 60.0) if spike_runs <= 10_000 else (20.0, 300.0)
    if not args.no_setup:
        ensure_database()
    started = time.perf_counter()
    if args.reuse:
        remeasure(args, requests=requests, spike_runs=spike_runs, lead=lead, deadline=deadline)
        return
    ctx = prepare(runs=runs, tenant_count=args.tenants, days=args.days, target_url="http://127.0.0.1:9/history")
    log(f"history: {len(ctx['jobs']):,} jobs in {ctx['jobs_seconds']:.1f} s; measuring the empty history")
    empty = measure_web(ctx, requests=requests, side="empty", budget=args.target_seconds)
    spikes = {}
    if spike_runs:
        spikes["empty"] = spike(spike_runs, lead=lead, deadline=deadline)
    load = history_load.load_history(jobs=ctx["jobs"], days=args.days, processes=args.load_processes)
    full = measure_web(ctx, requests=requests, side="history", budget=args.target_seconds)
    if spike_runs:
        spikes["history"] = spike(spike_runs, lead=lead, deadline=deadline)
        from bench.spike import clear_tenants

        clear_tenants([str(t.id) for t in bench_tenants(100)])
    sizes = disk(load["runs"])
    pruned = prune(ctx["tenants"], load["window_start"])
    load_avg = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    rep = Report("History: API, dashboard, spike and prune with a large run history", args.md)
    report(rep, ctx, load, empty, full, spikes if spike_runs else {}, pruned, sizes)
    rep.add(f"\nWhole bench: {(time.perf_counter() - started) / 60:.1f} min; load average at the end: {load_avg}.")
    rep.save()
    if not args.keep:
        reset_state()


if __name__ == "__main__":
    main()
