"""Job creation through the API: jobs/s and latency with 16 concurrent clients, one by one and in batches.

The web process is the Procfile's `web` line run as a PaaS runs it (`sh -c`, production settings by
default, DEBUG=false, $PORT), on the bench database and Redis DB, as tests/production does. The
clients (aiohttp, one process: this one) POST `/api/v1/jobs` with an API key of a bench tenant,
each request carrying `X-Forwarded-Proto: https` as the TLS proxy in front of production would;
then the same jobs through `POST /api/v1/jobs/batch`. The tenant's `max_jobs` and `api_rate` are
raised in its TenantLimits row (the admin's per-tenant override), so the bench measures the cost
of the checks, not their refusals. Every job is a cron job with a credential-like header (Fernet
at rest) and a JSON body, like a real one. CPU seconds per 1,000 jobs come from /proc (web
process group, all PostgreSQL backends, Redis, the client). Goal: >= 500 jobs/s one by one.

    .venv/bin/python -m bench.create                 # 4,000 single creates + 20,000 in batches
    .venv/bin/python -m bench.create --quick --batch-size 100 --clients 16
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable as `python bench/x.py` too

from bench.common import (
    BENCH_DB,
    ROOT,
    CpuMeter,
    Process,
    Report,
    base_parser,
    bench_env,
    ensure_database,
    fmt,
    free_port,
    log,
    percentiles,
    pg_connect,
    pids_named,
    processes,
    reset_state,
    setup_django,
    table,
    wait_for,
)

PROXY = {"X-Forwarded-Proto": "https"}
TENANT_SLUG = "bench-create"


def procfile_web(code: Path = ROOT) -> str:
    for line in (code / "Procfile").read_text().splitlines():
        name, _, command = line.partition(":")
        if name.strip() == "web":
            return command.strip()
    raise SystemExit("Procfile has no web line")


def job_body(k: int) -> dict:
    return {
        "name": f"bench-create-{k}",
        "schedule": {"type": "cron", "expression": "*/5 * * * *", "timezone": "Europe/Berlin"},
        "target": {
            "url": f"https://hooks.example.com/chime/{k}",
            "headers": {"Authorization": f"Bearer token-{k}", "X-Team": "billing"},
            "body": {"job": k, "report": "nightly"},
        },
        "retry": {"max_attempts": 5, "initial_backoff_seconds": 10, "max_backoff_seconds": 3600},
    }


def bench_key() -> str:
    """A fresh API key of the bench tenant (older ones revoked), limits lifted for the bench."""
    setup_django()
    from django.utils import timezone

    from apps.tenants.models import ApiKey, TenantLimits
    from apps.tenants.selectors import tenant_by_slug
    from apps.tenants.services import api_key_create, tenant_create

    tenant = tenant_by_slug(TENANT_SLUG) or tenant_create(slug=TENANT_SLUG, name="Benchmarks: job creation")
    TenantLimits.objects.update_or_create(
        tenant=tenant, defaults={"max_jobs": 10_000_000, "api_rate_limit": "10000000/min"}
    )
    ApiKey.objects.filter(tenant=tenant, revoked_at__isnull=True).update(revoked_at=timezone.now())
    return api_key_create(tenant=tenant, name="bench").raw_key


def start_web(code: Path = ROOT, **extra: str) -> tuple[Process, str]:
    """The Procfile's web line of the tree `code`, as a PaaS starts it: `sh -c`, $PORT, no
    DJANGO_SETTINGS_MODULE."""
    port = free_port()
    env = bench_env()
    env["PYTHONPATH"] = str(code)
    for name in ("DJANGO_SETTINGS_MODULE", "WEBHOOK_ALLOW_PRIVATE_NETWORKS", "CHIME_PROCESS_TYPE"):
        env.pop(name, None)
    env.update({"DEBUG": "false", "ALLOWED_HOSTS": "127.0.0.1", "PORT": str(port), "SECRET_KEY": "bench-create"})
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    command = env.pop("CHIME_BENCH_WEB_COMMAND", None) or procfile_web(code)  # to try another line than the Procfile's
    process = Process("create-web", ["/bin/sh", "-c", command], env, cwd=code)
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        import urllib.request

        if process.popen.poll() is not None:
            raise RuntimeError(f"web exited:\n{process.log()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=2) as answer:  # noqa: S310 (loopback)
                return answer.status == 200
        except OSError:
            return False

    wait_for(healthy, 120, "web answers /healthz")
    return process, url


async def _drive(url: str, key: str, payloads: list, clients: int, path: str, idempotent: bool) -> dict:
    import aiohttp

    headers = {**PROXY, "Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    errors: list[str] = []
    queue = list(reversed(payloads))
    run_token = uuid.uuid4().hex  # keys are kept 24 h: a new one per measurement, or it would replay
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def client(number: int) -> None:
            while queue:
                k, payload = queue.pop()
                extra = {"Idempotency-Key": f"bench-{run_token}-{k}"} if idempotent else {}
                data = json.dumps(payload)
                t0 = time.perf_counter()
                async with session.post(url + path, data=data, headers={**headers, **extra}) as response:
                    body = await response.read()
                latencies.append(time.perf_counter() - t0)
                statuses[response.status] = statuses.get(response.status, 0) + 1
                if response.status >= 300 and len(errors) < 3:
                    errors.append(f"{response.status} {body[:300]!r}")

        t0 = time.perf_counter()
        await asyncio.gather(*(client(i) for i in range(clients)))
        wall = time.perf_counter() - t0
    return {"latencies": latencies, "statuses": statuses, "errors": errors, "wall": wall}


def drive(url: str, key: str, payloads: list, *, clients: int, path: str, idempotent: bool = False) -> dict:
    return asyncio.run(_drive(url, key, payloads, clients, path, idempotent))


def bench_backends() -> list[int]:
    """The PostgreSQL backends serving the bench database (the web's pool: long-lived), not the
    whole server's: other databases on a shared machine have their own load."""
    with pg_connect() as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()", [BENCH_DB]
        ).fetchall()
    return [pid for (pid,) in rows]


def tenant_jobs() -> int:
    with pg_connect() as conn:
        return conn.execute(
            "SELECT count(*) FROM jobs_jobdefinition d JOIN tenants_tenant t ON t.id = d.tenant_id WHERE t.slug = %s",
            [TENANT_SLUG],
        ).fetchone()[0]


def measure(web: Process, url: str, key: str, *, label: str, jobs: int, clients: int, batch: int, **kw) -> dict:
    start = tenant_jobs()
    if batch:
        payloads = [
            (k, {"jobs": [job_body(start + k * batch + j) for j in range(batch)]}) for k in range(jobs // batch)
        ]
        path = "/api/v1/jobs/batch"
    else:
        payloads = [(k, job_body(start + k)) for k in range(jobs)]
        path = "/api/v1/jobs"
    meter = CpuMeter(
        {
            "web": web.group_pids,
            "postgres": bench_backends,
            "redis": lambda: pids_named("redis-server"),
            "client": lambda: [os.getpid()],
        }
    )
    meter.start()
    result = drive(url, key, payloads, clients=clients, path=path, **kw)
    used = meter.stop()
    created = tenant_jobs() - start
    result.update(label=label, batch=batch, clients=clients, created=created, held_before=start, cpu=used)
    result["jobs_per_s"] = created / result["wall"]
    result["lat"] = percentiles(result.pop("latencies"))
    rate = result["jobs_per_s"]
    log(f"create: {label}: {created:,} jobs in {result['wall']:.1f} s = {rate:.0f} jobs/s {result['statuses']}")
    for error in result["errors"]:
        log(f"create:   e.g. {error}")
    return result


def run_variant(
    *, code: Path, label: str, jobs: int, batch_jobs: int, clients: int, batch_size: int, web_env: dict[str, str]
) -> list[dict]:
    """One web process of `code`, measured from an empty job table: one by one, with
    Idempotency-Key, and in batches (when the tree has the batch endpoint)."""
    reset_state()
    key = bench_key()
    results = []
    with processes():
        web, url = start_web(code, **web_env)
        drive(url, key, [(k, job_body(10_000_000 + k)) for k in range(200)], clients=clients, path="/api/v1/jobs")
        common = {"jobs": jobs, "clients": clients}
        results.append(measure(web, url, key, label=f"{label}: one by one", batch=0, **common))
        results.append(
            measure(web, url, key, label=f"{label}: one by one, Idempotency-Key", batch=0, idempotent=True, **common)
        )
        probe = drive(url, key, [(0, {"jobs": [job_body(20_000_000)]})], clients=1, path="/api/v1/jobs/batch")
        if batch_jobs and 201 in probe["statuses"]:
            for size in dict.fromkeys([batch_size, 1000]):
                results.append(
                    measure(
                        web, url, key, label=f"{label}: batches of {size}", jobs=batch_jobs, clients=clients, batch=size
                    )
                )
        web.stop()
    return results


def run(
    *,
    variants: list[tuple[str, Path]],
    rounds: int,
    jobs: int,
    batch_jobs: int,
    clients: int,
    batch_size: int,
    web_env: dict[str, str],
) -> list[dict]:
    """Every variant (tree) in turn, `rounds` times, interleaved: on a shared machine the load
    drifts, so trees are compared within a round."""
    ensure_database()
    results = []
    for round_number in range(rounds):
        for label, code in variants:
            name = f"{label} (round {round_number + 1})" if rounds > 1 else label
            results += run_variant(
                code=code,
                label=name,
                jobs=jobs,
                batch_jobs=batch_jobs,
                clients=clients,
                batch_size=batch_size,
                web_env=web_env,
            )
    reset_state()
    return results


def report(results: list[dict], md: str | None, note: str) -> None:
    rep = Report("Create: jobs through the API", md)
    rep.add(
        "The Procfile's `web` line (production settings, DEBUG=false), "
        f"{results[0]['clients']} concurrent clients (aiohttp, keep-alive) POSTing cron jobs with a "
        "secret header and a body; jobs/s = jobs created / wall time. CPU = seconds per 1,000 jobs "
        f"from /proc. Goal: >= 500 jobs/s one by one. {note}\n"
    )
    rows = []
    for r in results:
        per_k = {name: 1000 * value / max(r["created"], 1) for name, value in r["cpu"].items()}
        rows.append(
            [
                r["label"],
                f"{r['created']:,}",
                f"{r['held_before']:,}",
                f"{r['jobs_per_s']:,.0f}",
                fmt(1000 * r["lat"]["p50"], " ms", 1),
                fmt(1000 * r["lat"]["p99"], " ms", 1),
                ", ".join(f"{k} {v:.2f}" for k, v in per_k.items()),
                ", ".join(f"{s}: {n:,}" for s, n in sorted(r["statuses"].items())),
            ]
        )
    rep.add(
        table(
            [
                "requests",
                "jobs created",
                "tenant's jobs before",
                "jobs/s",
                "request p50",
                "p99",
                "CPU s per 1,000 jobs",
                "statuses",
            ],
            rows,
        )
    )
    rep.save()


def main() -> None:
    parser = base_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, help="single creates per variant (default 4,000; --quick 1,000)")
    parser.add_argument("--batch-jobs", type=int, help="jobs made in batches (default 20,000; --quick 5,000; 0: none)")
    parser.add_argument("--batch-size", type=int, default=100, help="jobs per batch request (default 100)")
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients (default 16)")
    parser.add_argument("--code", type=Path, help="another Chime tree to run the same way, interleaved (a baseline)")
    parser.add_argument("--rounds", type=int, default=1, help="repeat every variant, interleaved (default 1)")
    parser.add_argument("--web-env", action="append", default=[], metavar="NAME=VALUE", help="extra env of the web")
    args = parser.parse_args()
    jobs = args.jobs or (1000 if args.quick else 4000)
    batch_jobs = args.batch_jobs if args.batch_jobs is not None else (5000 if args.quick else 20000)
    if not args.no_setup:
        ensure_database()
    web_env = dict(item.split("=", 1) for item in args.web_env)
    variants = [("this tree", ROOT)] + ([(f"{args.code}", args.code.resolve())] if args.code else [])
    results = run(
        variants=variants,
        rounds=args.rounds,
        jobs=jobs,
        batch_jobs=batch_jobs,
        clients=args.clients,
        batch_size=args.batch_size,
        web_env=web_env,
    )
    load = Path("/proc/loadavg").read_text().split()[:3]
    note = f"Load average at the end: {' '.join(load)}." + (f" Web env: {web_env}." if web_env else "")
    report(results, args.md, note)


if __name__ == "__main__":
    main()
