"""A real webhook receiver on 127.0.0.1 that verifies signatures as a tenant's endpoint would."""

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks import Webhook, WebhookVerificationError


@dataclass
class Delivery:
    path: str
    method: str
    headers: dict[str, str]
    body: bytes
    received_at: float
    signature_ok: bool | None = None

    @property
    def webhook_id(self) -> str:
        return self.headers.get("webhook-id", "")

    def json(self):
        return json.loads(self.body) if self.body else None


@dataclass
class Reply:
    status: int = 200
    delay_seconds: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b"ok"


class Receiver:
    """Records every request. `respond` decides the reply per request (default 200 at once)."""

    def __init__(self, secrets: list[str] | None = None):
        self.secrets = secrets or []
        self.deliveries: list[Delivery] = []
        self.respond: Callable[[Delivery], Reply] = lambda delivery: Reply()
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _handle(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k.lower(): v for k, v in self.headers.items()}
                delivery = Delivery(self.path, self.command, headers, body, time.time())
                delivery.signature_ok = receiver.verify(delivery)
                with receiver._lock:
                    receiver.deliveries.append(delivery)
                reply = receiver.respond(delivery)
                if reply.delay_seconds:
                    time.sleep(reply.delay_seconds)
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)

            do_POST = do_PUT = do_PATCH = do_GET = do_DELETE = _handle

            def log_message(self, *args):
                pass

        class Server(ThreadingHTTPServer):
            request_queue_size = 1024  # the default listen backlog of 5 refuses bursts of deliveries

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def verify(self, delivery: Delivery) -> bool | None:
        if not self.secrets:
            return None
        for secret in self.secrets:
            try:
                Webhook(secret).verify(delivery.body, delivery.headers)
                return True
            except WebhookVerificationError:
                continue
            except json.JSONDecodeError:
                return True  # verify() checks the signature first, then parses the body as JSON
        return False

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "Receiver":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def received(self, predicate: Callable[[Delivery], bool] = lambda d: True) -> list[Delivery]:
        with self._lock:
            return [d for d in self.deliveries if predicate(d)]
