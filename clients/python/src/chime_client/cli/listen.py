"""``chimectl listen``: a local receiver that verifies Chime's deliveries and prints them.

For trying Chime against your own machine: point a job at ``http://127.0.0.1:9000/`` (the server
must allow private targets: WEBHOOK_ALLOW_PRIVATE_NETWORKS=true) or at a tunnel to it. Each
delivery goes through the receiver toolkit (verify, then dedupe by webhook-id in memory), so what
it prints is what your own receiver would see.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Annotated

import typer
from rich.panel import Panel
from rich.syntax import Syntax

from chime_client.dedupe import MemoryStore
from chime_client.receiver import InvalidSignature, Rejection, WebhookReceiver, verify

from . import app
from .output import console

REFRESH_SECONDS = 5.0


class _Secrets:
    """Given secrets, or the tenant's current one from the API, fetched again (at most every few
    seconds) when a signature does not match: a ``chimectl secret rotate`` is picked up."""

    def __init__(self, given: list[str], client_factory):
        self.given = given
        self.client_factory = client_factory
        self.current: list[str] = list(given)
        self.lock = threading.Lock()
        if not given:
            self.current = [self.client_factory().signing_secret.get()["secret"]]
        self.refetched_at = float("-inf")  # the first mismatch refetches at once

    def refresh(self) -> bool:
        """After a mismatch: fetch the secret again (at most every REFRESH_SECONDS, so forged
        requests cannot flood the API); True if it changed."""
        if self.given:
            return False
        with self.lock:
            if time.monotonic() - self.refetched_at < REFRESH_SECONDS:
                return False
            self.refetched_at = time.monotonic()
            fetched = [self.client_factory().signing_secret.get()["secret"]]
            changed, self.current = fetched != self.current, fetched
            return changed

    def __call__(self) -> list[str]:
        return self.current


def _report(as_json: bool, entry: dict) -> None:
    if as_json:
        sys.stdout.write(json.dumps(entry, default=str) + "\n")
        sys.stdout.flush()
        return
    verdict = {
        "delivered": "[green]verified[/green]",
        "duplicate": "[yellow]duplicate (not handled again)[/yellow]",
        "rejected": f"[red]rejected {entry['status']}: {entry.get('reason')}[/red]",
    }[entry["outcome"]]
    title = f"{entry['method']} {entry['path']}  webhook-id={entry.get('webhook_id')}  attempt={entry.get('attempt')}"
    body = entry.get("body")
    content = Syntax(json.dumps(body, indent=2), "json") if isinstance(body, dict | list) else str(body or "")
    console.print(Panel(content, title=title, subtitle=verdict, title_align="left"))


def serve(host: str, port: int, receiver: WebhookReceiver, secrets: _Secrets, answer: int, as_json: bool):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _handle(self):
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {k.lower(): v for k, v in self.headers.items()}
            outcome = receiver.gate(raw, headers)
            if isinstance(outcome, Rejection) and outcome.status == 401 and secrets.refresh():
                outcome = receiver.gate(raw, headers)  # the secret was rotated meanwhile
            entry = {
                "method": self.command,
                "path": self.path,
                "webhook_id": headers.get("webhook-id"),
                "attempt": headers.get("chime-attempt"),
                "run_id": headers.get("chime-run-id"),
                "job_id": headers.get("chime-job-id"),
                "headers": headers,  # --json: all of the request, to replay or inspect it
                "raw_body": raw.decode("utf-8", "replace"),
            }
            try:
                entry["body"] = json.loads(raw) if raw else None
            except ValueError:
                entry["body"] = raw.decode("utf-8", "replace")
            if isinstance(outcome, Rejection):
                status = outcome.status
                entry.update(outcome="duplicate" if status in (200, 503) else "rejected", reason=outcome.message)
                extra = outcome.headers
            else:
                status = answer
                entry.update(outcome="delivered", verified=True)
                receiver.finish(outcome, ok=200 <= answer < 300)
                extra = {}
            entry["status"] = status
            _report(as_json, entry)
            reply = b"ok" if status < 400 else entry.get("reason", "error").encode()
            self.send_response(status)
            for name, value in extra.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        do_POST = do_PUT = do_PATCH = do_DELETE = do_GET = _handle

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    url = f"http://{host}:{server.server_address[1]}"
    if as_json:
        _report(True, {"listening": url})
    else:
        console.print(f"listening on [bold]{url}[/bold] (Ctrl-C to stop)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


@app.command(
    "listen", epilog="Example: chimectl listen --port 9000   (then a job with target url http://127.0.0.1:9000/)"
)
def listen(
    ctx: typer.Context,
    port: Annotated[int, typer.Option(help="port to listen on (0: any free one)")] = 9000,
    host: Annotated[str, typer.Option(help="address to bind")] = "127.0.0.1",
    secret: Annotated[
        list[str] | None, typer.Option(help="verify with this whsec_ secret (repeatable); default: the API's")
    ] = None,
    answer: Annotated[int, typer.Option("--status", help="status to answer verified deliveries with")] = 200,
    tolerance: Annotated[float, typer.Option(help="accepted timestamp skew, seconds")] = 300,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON line per delivery")] = False,
):
    """Receive deliveries locally: verify the signature, drop duplicates by webhook-id, print them."""
    state = ctx.find_root().obj
    secrets = _Secrets(list(secret or []), state.client)
    receiver = WebhookReceiver(secrets, store=MemoryStore(), tolerance_seconds=tolerance)
    serve(host, port, receiver, secrets, answer, as_json or state.json)


__all__ = ["InvalidSignature", "listen", "serve", "verify"]
