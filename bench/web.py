"""The web's cost per request: CPU milliseconds of the Procfile's `web` process for a few kinds of
request, this tree against another (`--code`), interleaved.

What every request pays before and after its view (uvicorn, Django's ASGI handling, the thread it
runs in) shows best on requests that do little else: `/healthz` (answered by the first middleware),
an API 404 (the whole chain, authentication, no query) and an authenticated list of one job (one
key lookup, the rate limit, one query). Each web process is the Procfile's line started as a PaaS
starts it (bench/create.py: production settings, DEBUG=false); both trees' processes run side by
side and are driven in turn, round after round, so the machine's drift hits both alike. CPU from
/proc of the web's process group; 16 concurrent clients (aiohttp, keep-alive).

    .venv/bin/python -m bench.web --code /tmp/chime-before --rounds 4
    .venv/bin/python -m bench.web --quick
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable as `python bench/x.py` too

from bench.common import ROOT, CpuMeter, Report, base_parser, ensure_database, log, median, processes, table
from bench.create import PROXY, bench_key, start_web

PATHS = ("/healthz", "/api/v1/no-such-thing", "/api/v1/jobs?limit=1")


async def _drive(url: str, key: str, n: int, clients: int) -> tuple[float, dict]:
    import aiohttp

    headers = {**PROXY, "Authorization": f"Bearer {key}"}
    left, statuses = [n], {}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=clients)) as session:

        async def client() -> None:
            while left[0] > 0:
                left[0] -= 1
                async with session.get(url, headers=headers) as response:
                    await response.read()
                statuses[response.status] = statuses.get(response.status, 0) + 1

        t0 = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
        return n / (time.perf_counter() - t0), statuses


def run(*, variants: list[tuple[str, Path]], rounds: int, requests: int, clients: int) -> list[dict]:
    key = bench_key()
    results = []
    with processes():
        webs = [(label, *start_web(code)) for label, code in variants]
        for _, _, url in webs:  # warm: imports, the pool's connections, the key's cache
            for path in PATHS:
                asyncio.run(_drive(url + path, key, 300, clients))
        for round_number in range(rounds):
            for path in PATHS:
                for label, web, url in webs:
                    meter = CpuMeter({"web": web.group_pids})
                    meter.start()
                    rate, statuses = asyncio.run(_drive(url + path, key, requests, clients))
                    cpu_ms = 1000 * meter.stop()["web"] / requests
                    log(f"web: round {round_number + 1} {label} {path}: {rate:,.0f}/s, {cpu_ms:.3f} CPU-ms {statuses}")
                    results.append({"label": label, "path": path, "rate": rate, "cpu_ms": cpu_ms, "statuses": statuses})
    return results


def report(results: list[dict], md: str | None, *, clients: int, requests: int) -> None:
    rep = Report("Web: CPU per request", md)
    rep.add(
        f"The Procfile's `web` line (production settings, DEBUG=false), {clients} concurrent clients, "
        f"{requests:,} GETs per measurement; CPU milliseconds of the web's process group per request "
        "(/proc), median over the rounds (each round's value in brackets), trees interleaved.\n"
    )
    rows = []
    for path in PATHS:
        for label in dict.fromkeys(r["label"] for r in results):
            mine = [r for r in results if r["label"] == label and r["path"] == path]
            cpu = [r["cpu_ms"] for r in mine]
            statuses = sorted({s for r in mine for s in r["statuses"]})
            rows.append(
                [
                    f"`{path}`",
                    label,
                    f"{median(cpu):.3f} ({', '.join(f'{v:.2f}' for v in cpu)})",
                    f"{median([r['rate'] for r in mine]):,.0f}/s",
                    ", ".join(map(str, statuses)),
                ]
            )
    rep.add(table(["request", "tree", "web CPU-ms per request", "requests/s", "statuses"], rows))
    rep.save()


def main() -> None:
    parser = base_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--code", type=Path, help="another Chime tree to run the same way, interleaved (a baseline)")
    parser.add_argument("--rounds", type=int, help="measurements per tree and request (default 4; --quick 2)")
    parser.add_argument("--requests", type=int, help="requests per measurement (default 3,000; --quick 1,000)")
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients (default 16)")
    args = parser.parse_args()
    rounds = args.rounds or (2 if args.quick else 4)
    requests = args.requests or (1000 if args.quick else 3000)
    if not args.no_setup:
        ensure_database()
    variants = [("this tree", ROOT)] + ([(str(args.code), args.code.resolve())] if args.code else [])
    results = run(variants=variants, rounds=rounds, requests=requests, clients=args.clients)
    report(results, args.md, clients=args.clients, requests=requests)


if __name__ == "__main__":
    main()
