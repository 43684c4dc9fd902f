"""Delivery: throughput per worker process against the raw HTTP client ceiling, fairness between
tenants, and high priority under a low-priority backlog.

1. throughput: the ceiling of aiohttp itself (one process, 200 requests in flight) and of Chime's
   transport (batches of 50, as a task sends them), then Chime end to end: N runs already
   `queued`, published to a Celery worker with --concurrency 1 and 2; runs/s until all succeeded.
2. fairness: tenant A has 50,000 runs due at T, tenant B 100 at the same T; 1 scheduler,
   1 worker (concurrency 2). B's lag (finished - scheduled) against A's.
3. priority: 10,000 low-priority runs due at T, 20 high-priority ones due at T + 3 s; how late the
   high ones start.

    .venv/bin/python -m bench.delivery [--quick]
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

from bench.common import (
    ReceiverProcess,
    Report,
    base_parser,
    bench_tenants,
    ensure_database,
    fmt,
    load_once_definitions,
    log,
    percentiles,
    pg_connect,
    processes,
    reset_state,
    setup_django,
    start_scheduler,
    start_worker,
    table,
    utcnow,
    wait_for,
)


def raw_ceiling(url: str, n: int, in_flight: int = 200) -> float:
    import aiohttp

    async def run() -> float:
        connector = aiohttp.TCPConnector(limit=in_flight)
        async with aiohttp.ClientSession(connector=connector) as session:
            semaphore = asyncio.Semaphore(in_flight)

            async def one():
                async with semaphore, session.post(url, data=b'{"bench":true}') as response:
                    await response.read()

            await asyncio.gather(*(one() for _ in range(200)))  # warm the pool
            start = time.perf_counter()
            await asyncio.gather(*(one() for _ in range(n)))
            return n / (time.perf_counter() - start)

    return asyncio.run(run())


def transport_ceiling(url: str, n: int, batch: int = 50) -> float:
    from apps.delivery.transport import Transport, WebhookRequest

    transport = Transport(allow_private_networks=True)
    requests = [
        WebhookRequest(
            key=str(i),
            url=url,
            method="POST",
            headers={"Content-Type": "application/json"},
            body=b'{"bench":true}',
            timeout_seconds=10,
        )
        for i in range(batch)
    ]
    transport.send_many(requests)
    start = time.perf_counter()
    for _ in range(n // batch):
        transport.send_many(requests)
    rate = (n // batch) * batch / (time.perf_counter() - start)
    transport.close()
    return rate


def queued_runs(tenant, url: str, n: int) -> list[str]:
    """n definitions far in the future, each with one run already `queued` (no scheduler needed)."""
    far = (utcnow() + timedelta(days=365)).replace(microsecond=0)
    load_once_definitions(tenant=tenant, fire_times=(far for _ in range(n)), count=n, target_url=url)
    with pg_connect() as conn:
        rows = conn.execute(
            """INSERT INTO jobs_jobrun (id, tenant_id, definition_id, partition, priority, scheduled_for, trigger,
                   status, status_reason, available_at, attempt_count, attempts_before_replay, lease_owner,
                   created_at, queued_at)
               SELECT gen_random_uuid(), tenant_id, id, partition, priority, now(), 'schedule', 'queued', '',
                      now(), 0, 0, '', now(), now()
                 FROM jobs_jobdefinition RETURNING id"""
        ).fetchall()
    return [str(row[0]) for row in rows]


def chime_throughput(tenant, n: int, concurrency: int) -> float:
    reset_state()
    with processes():  # its own receiver: leaving a processes() block stops every process in it
        receiver = ReceiverProcess(f"delivery-receiver-c{concurrency}")
        ids = queued_runs(tenant, receiver.url, n)
        start_worker(f"delivery-worker-c{concurrency}", concurrency=concurrency)
        from apps.delivery.enqueue import publish_runs

        start = time.perf_counter()
        publish_runs(ids, priority="default")

        def done():
            with pg_connect() as conn:
                return conn.execute("SELECT count(*) FROM jobs_jobrun WHERE status = 'succeeded'").fetchone()[0] >= n

        wait_for(done, 300, "all delivered", interval=0.2)
        return n / (time.perf_counter() - start)


def lags(sql: str) -> list[float]:
    with pg_connect() as conn:
        return [float(row[0]) for row in conn.execute(sql).fetchall()]


def fairness(tenants: list, big: int, small: int) -> dict:
    reset_state()
    a, b = tenants[0], tenants[1]
    with processes():
        receiver = ReceiverProcess("fairness-receiver")
        start_worker("fairness-worker", concurrency=2)
        start_scheduler("fairness-scheduler", "--shard", "0", "--shards", "1")
        fire = (utcnow() + timedelta(seconds=15)).replace(microsecond=0)
        load_once_definitions(tenant=a, fire_times=(fire for _ in range(big)), count=big, target_url=receiver.url)
        load_once_definitions(tenant=b, fire_times=(fire for _ in range(small)), count=small, target_url=receiver.url)
        with pg_connect() as conn:
            conn.execute("ANALYZE jobs_jobdefinition")

        def done():
            with pg_connect() as conn:
                n = conn.execute("SELECT count(*) FROM jobs_jobrun WHERE status = 'succeeded'").fetchone()[0]
            return n >= big + small

        wait_for(done, 600, "fairness runs delivered", interval=0.5)
    query = """SELECT EXTRACT(EPOCH FROM finished_at - scheduled_for) FROM jobs_jobrun WHERE tenant_id = '{}'"""
    return {
        "a": percentiles(lags(query.format(a.id)), (50, 95)),
        "b": percentiles(lags(query.format(b.id)), (50, 95)),
    }


def priority(tenants: list, backlog: int, urgent: int) -> dict:
    reset_state()
    tenant = tenants[0]
    with processes():
        receiver = ReceiverProcess("priority-receiver")
        start_worker("priority-worker", concurrency=2)
        start_scheduler("priority-scheduler", "--shard", "0", "--shards", "1")
        fire = (utcnow() + timedelta(seconds=15)).replace(microsecond=0)
        load_once_definitions(
            tenant=tenant, fire_times=(fire for _ in range(backlog)), count=backlog, target_url=receiver.url
        )
        with pg_connect() as conn:
            conn.execute("UPDATE jobs_jobdefinition SET priority = 'low'")
        later = fire + timedelta(seconds=3)
        load_once_definitions(
            tenant=tenant, fire_times=(later for _ in range(urgent)), count=urgent, target_url=receiver.url
        )
        with pg_connect() as conn:
            conn.execute("UPDATE jobs_jobdefinition SET priority = 'high' WHERE priority <> 'low'")
            conn.execute("ANALYZE jobs_jobdefinition")

        def high_done():
            with pg_connect() as conn:
                return (
                    conn.execute(
                        "SELECT count(*) FROM jobs_jobrun WHERE priority = 'high' AND status = 'succeeded'"
                    ).fetchone()[0]
                    >= urgent
                )

        wait_for(high_done, 120, "high-priority runs delivered", interval=0.2)
        with pg_connect() as conn:
            low_left = conn.execute(
                "SELECT count(*) FROM jobs_jobrun WHERE priority = 'low' AND status <> 'succeeded'"
            ).fetchone()[0]
    started = lags("SELECT EXTRACT(EPOCH FROM started_at - scheduled_for) FROM jobs_jobrun WHERE priority = 'high'")
    return {"high": percentiles(started, (50, 95)), "low_left": low_left}


def main() -> None:
    parser = base_parser(__doc__.split("\n\n")[0])
    args = parser.parse_args()
    n = 5_000 if args.quick else 10_000
    big = 20_000 if args.quick else 50_000
    if not args.no_setup:
        ensure_database()
    setup_django()
    tenants = bench_tenants(2)

    reset_state()
    with processes():
        receiver = ReceiverProcess("delivery-receiver")
        raw = sorted(raw_ceiling(receiver.url, n) for _ in range(3))[1]
        transport = sorted(transport_ceiling(receiver.url, n) for _ in range(3))[1]
    log(f"delivery: raw aiohttp {raw:,.0f}/s, transport {transport:,.0f}/s")
    per_process = {c: chime_throughput(tenants[0], n, c) for c in (1, 2)}
    log(f"delivery: chime per worker {per_process}")
    fair = fairness(tenants, big, 100)
    log(f"delivery: fairness {fair}")
    prio = priority(tenants, n, 20)
    log(f"delivery: priority {prio}")
    reset_state()

    rep = Report("Delivery: throughput, fairness, priority", args.md)
    rep.add(f"Local receiver in its own process; {n:,} requests or runs per measurement.\n")
    rep.add(
        table(
            ["what", "rate"],
            [
                ["aiohttp raw ceiling (1 process, 200 in flight, median of 3)", f"{raw:,.0f} req/s"],
                ["Chime transport, batches of 50 (median of 3)", f"{transport:,.0f} req/s"],
                ["Chime end to end, 1 worker process (claim, sign, send, record)", f"{per_process[1]:,.0f} runs/s"],
                ["Chime end to end, 1 worker, 2 processes", f"{per_process[2]:,.0f} runs/s"],
                ["one worker process vs the raw ceiling", f"{per_process[1] / raw:.0%}"],
            ],
        )
    )
    rep.add(
        f"\nFairness: tenant A {big:,} runs and tenant B 100 runs due at the same second; lag = finished - "
        "scheduled, seconds.\n"
    )
    rep.add(
        table(
            ["tenant", "runs", "p50", "p95", "max"],
            [
                ["A", f"{big:,}"] + [fmt(fair["a"][k]) for k in ("p50", "p95", "max")],
                ["B", "100"] + [fmt(fair["b"][k]) for k in ("p50", "p95", "max")],
            ],
        )
    )
    rep.add(
        f"\nPriority: {n:,} low-priority runs due at T, 20 high-priority runs due at T + 3 s; how late the high "
        "ones started (started - scheduled), seconds. Goal: within 1 s.\n"
    )
    rep.add(
        table(
            ["p50", "p95", "max", "low-priority runs still undelivered then"],
            [[fmt(prio["high"][k]) for k in ("p50", "p95", "max")] + [f"{prio['low_left']:,}"]],
        )
    )
    rep.save()


if __name__ == "__main__":
    main()
