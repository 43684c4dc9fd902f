"""A fast webhook receiver for the benches (aiohttp.web on 127.0.0.1).

Every request is recorded in memory as (arrival unix time, webhook-id, Chime-Scheduled-For) when it
arrives, then answered 200 after the delay of its URL's latency profile (bench/profiles.py:
`/realistic/<key>` log-normal and seeded, `/hold/<seconds>/...` held, any other path at once).
GET /_count returns how many were recorded; GET /_records returns them (`?clear=1` also forgets
them); on SIGTERM the records are written to --dump as JSON lines. Signatures are not verified here
(the tests do that): the receiver must not be the bottleneck.

    python -m bench.receiver --port 8765 --dump /tmp/deliveries.jsonl
    python -m bench.receiver --port 8765 --dump /tmp/d.jsonl --hosts 4 --seed 7   # 127.0.0.1-4
"""

import argparse
import asyncio
import contextlib
import json
import sys
import time
from pathlib import Path

from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable as `python bench/receiver.py` too

from bench.profiles import Realistic, delay_for


def build_app(dump_path: str, profile: Realistic | None = None) -> web.Application:
    profile = profile or Realistic()
    records: list[tuple[float, str, str]] = []

    async def hook(request: web.Request) -> web.Response:
        arrival = time.time()
        await request.read()
        records.append((arrival, request.headers.get("webhook-id", ""), request.headers.get("Chime-Scheduled-For", "")))
        delay = delay_for(request.path, profile)
        if delay:
            await asyncio.sleep(delay)
        return web.Response(text="ok")

    async def count(request: web.Request) -> web.Response:
        return web.json_response({"count": len(records)})

    async def records_view(request: web.Request) -> web.Response:
        out = list(records)
        if request.query.get("clear"):
            del records[: len(out)]
        return web.json_response(out)

    async def dump(app: web.Application) -> None:
        with open(dump_path, "w") as fh:
            for record in records:
                fh.write(json.dumps(record) + "\n")

    app = web.Application(client_max_size=1024**2)
    app.router.add_get("/_count", count)
    app.router.add_get("/_records", records_view)
    app.router.add_route("*", "/{tail:.*}", hook)
    app.on_cleanup.append(dump)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--dump", required=True, help="JSON-lines file written on SIGTERM")
    parser.add_argument(
        "--hosts", type=int, default=1, help="listen on 127.0.0.1 .. 127.0.0.N (endpoints on different hosts)"
    )
    defaults = Realistic()
    parser.add_argument("--seed", type=int, default=defaults.seed, help="seed of the realistic profile")
    parser.add_argument("--median", type=float, default=defaults.median, help="realistic: median seconds")
    parser.add_argument("--p99", type=float, default=defaults.p99, help="realistic: 99th percentile, seconds")
    parser.add_argument("--hang-share", type=float, default=defaults.hang_share, help="realistic: share hanging")
    parser.add_argument("--hang-seconds", type=float, default=defaults.hang_seconds, help="realistic: hang time")
    args = parser.parse_args()
    profile = Realistic(
        seed=args.seed, median=args.median, p99=args.p99, hang_share=args.hang_share, hang_seconds=args.hang_seconds
    )
    with contextlib.suppress(ImportError):
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    hosts = [f"127.0.0.{i}" for i in range(1, args.hosts + 1)]
    web.run_app(
        build_app(args.dump, profile),
        host=hosts if len(hosts) > 1 else hosts[0],
        port=args.port,
        access_log=None,
        print=None,
        backlog=1024,
    )


if __name__ == "__main__":
    main()
