"""A fast webhook receiver for the benches (aiohttp.web on 127.0.0.1).

Every request is recorded in memory as (arrival unix time, webhook-id, Chime-Scheduled-For) and
answered 200 at once. GET /_count returns how many were recorded; on SIGTERM the records are
written to --dump as JSON lines. Signatures are not verified here (the tests do that): the
receiver must not be the bottleneck.

    python -m bench.receiver --port 8765 --dump /tmp/deliveries.jsonl
"""

import argparse
import asyncio
import contextlib
import json
import time

from aiohttp import web


def build_app(dump_path: str) -> web.Application:
    records: list[tuple[float, str, str]] = []

    async def hook(request: web.Request) -> web.Response:
        arrival = time.time()
        await request.read()
        records.append((arrival, request.headers.get("webhook-id", ""), request.headers.get("Chime-Scheduled-For", "")))
        return web.Response(text="ok")

    async def count(request: web.Request) -> web.Response:
        return web.json_response({"count": len(records)})

    async def dump(app: web.Application) -> None:
        with open(dump_path, "w") as fh:
            for record in records:
                fh.write(json.dumps(record) + "\n")

    app = web.Application(client_max_size=1024**2)
    app.router.add_get("/_count", count)
    app.router.add_route("*", "/{tail:.*}", hook)
    app.on_cleanup.append(dump)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--dump", required=True, help="JSON-lines file written on SIGTERM")
    args = parser.parse_args()
    with contextlib.suppress(ImportError):
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    web.run_app(build_app(args.dump), host="127.0.0.1", port=args.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
