"""The webhook loop's own CPU per request: Chime's Transport (libcurl, apps/delivery/curl_loop.py)
against raw aiohttp on asyncio's loop and on uvloop's (the client it replaced), interleaved in one
run against the bench receiver (bench/receiver.py).

    .venv/bin/python -m bench.transport_loop --n 3000 --rounds 2

Per request: CPU seconds of the thread that runs the requests (/proc/self/task/<tid>/stat) and
wall time, in messages of 50 requests as the delivery window submits them. Raw aiohttp is the floor
a Python client on an event loop pays (no URL check, no timeouts, no excerpt); Chime's figure
includes its own per-request work (the loop thread's share of it: the URL check and the header
lines are built in the submitting thread, which is not counted).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable as `python bench/x.py` too

import aiohttp

from bench.common import ReceiverProcess, base_parser, log, processes, table

BATCH = 50
HEADERS = {f"X-Bench-{i}": "x" * 30 for i in range(12)}  # about what a delivery carries
BODY = b'{"type":"chime.run","data":{"run_id":"bench"}}'


def thread_cpu(tid: int) -> float:
    with open(f"/proc/self/task/{tid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0  # utime + stime, in clock ticks


def measure_transport(n: int, url: str) -> tuple[float, float]:
    from apps.delivery.transport import Transport
    from apps.delivery.webhook_types import WebhookRequest

    transport = Transport(allow_private_networks=True)
    requests = [
        WebhookRequest(key=str(i), url=url, method="POST", headers=HEADERS, body=BODY, timeout_seconds=10)
        for i in range(n)
    ]
    concurrent.futures.wait(transport.submit_many(requests[:BATCH]))  # warm: connections open
    tid = transport._get_loop().thread.native_id
    cpu, wall = thread_cpu(tid), time.perf_counter()
    for start in range(0, n, BATCH):
        concurrent.futures.wait(transport.submit_many(requests[start : start + BATCH]))
    result = (thread_cpu(tid) - cpu) / n * 1e6, (time.perf_counter() - wall) / n * 1e6
    transport.close()
    return result


def measure_raw(n: int, url: str, new_loop) -> tuple[float, float]:
    loop = new_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def session():
        return aiohttp.ClientSession()

    client = asyncio.run_coroutine_threadsafe(session(), loop).result()

    async def one():
        async with client.post(url, data=BODY, headers=HEADERS) as response:
            await response.read()

    async def batch():
        await asyncio.gather(*(one() for _ in range(BATCH)))

    asyncio.run_coroutine_threadsafe(batch(), loop).result()
    cpu, wall = thread_cpu(thread.native_id), time.perf_counter()
    for _ in range(0, n, BATCH):
        asyncio.run_coroutine_threadsafe(batch(), loop).result()
    result = (thread_cpu(thread.native_id) - cpu) / n * 1e6, (time.perf_counter() - wall) / n * 1e6
    asyncio.run_coroutine_threadsafe(client.close(), loop).result()
    loop.call_soon_threadsafe(loop.stop)
    return result


def main() -> None:
    parser = base_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=3000, help="requests per measurement (default 3,000)")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds (default 2)")
    args = parser.parse_args()
    import uvloop

    from bench.common import setup_django

    setup_django()
    clients = {
        "raw aiohttp, asyncio's loop": lambda url: measure_raw(args.n, url, asyncio.new_event_loop),
        "raw aiohttp, uvloop": lambda url: measure_raw(args.n, url, uvloop.new_event_loop),
        "Chime Transport (libcurl multi)": lambda url: measure_transport(args.n, url),
    }
    rows = []
    with processes():
        receiver = ReceiverProcess("transport-loop-receiver")
        for round_ in range(1, args.rounds + 1):
            for client, measure in clients.items():
                cpu, wall = measure(receiver.url)
                log(f"round {round_}: {client}: {cpu:.0f} µs CPU, {wall:.0f} µs wall per request")
                rows.append([round_, client, f"{cpu:.0f} µs", f"{wall:.0f} µs"])
    text = table(["round", "client", "its thread's CPU per request", "wall per request"], rows)
    print(text)
    if args.md:
        with open(args.md, "a") as fh:
            fh.write("\n" + text + "\n")


if __name__ == "__main__":
    main()
