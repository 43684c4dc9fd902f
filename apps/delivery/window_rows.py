"""What the delivery window (apps/delivery/window.py) holds: a synchronous caller's `Ticket`, a
run admitted or parked (`Row`), a request in flight (`Flight`), and the endpoint a run counts
against (`host_of`)."""

import queue
import threading
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from apps.jobs.models import JobRun

from .preparing import DeliveryReport
from .webhook_types import WebhookRequest, WebhookResponse


class Ticket:
    """What a synchronous caller waits on: every run id it passed, until each is settled (not
    claimed, cancelled, handed back, left for the sweep, or its outcome recorded).

    Its runs' outcomes come to the caller's own thread (`ended`), which records them, renews their
    leases and claims its parked runs (Window.serve): all its database work happens in the
    caller's session, so it works inside the caller's transaction too (tests)."""

    def __init__(self, run_ids):
        self.report = DeliveryReport()
        self.ended: queue.SimpleQueue = queue.SimpleQueue()
        self._pending = {str(r) for r in run_ids}
        self._lock = threading.Lock()
        self._done = threading.Event()
        if not self._pending:
            self._done.set()

    def settle(self, run_ids, outcomes: dict | None = None) -> None:
        with self._lock:
            for outcome, n in (outcomes or {}).items():
                self.report.outcomes[outcome] += n
            self._pending.difference_update(str(r) for r in run_ids)
            if not self._pending:
                self._done.set()

    def done(self) -> bool:
        return self._done.is_set()


@dataclass(eq=False)
class Row:
    """A run admitted or parked: what the caps need, known before the run is claimed."""

    run_id: str
    tenant: str
    host: str
    priority: str
    ticket: Ticket | None
    guarded_job: str | None = None  # its job, if that job's concurrency policy is not `allow`


@dataclass(eq=False)
class Flight:
    row: Row
    run: JobRun
    request: WebhookRequest
    owner: str
    response: WebhookResponse | None = None
    future: object = field(default=None, repr=False)


def host_of(url: str) -> str:
    """The endpoint a cap per host counts: host and port (an origin), as the connection pool does."""
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return f"{(parts.hostname or '').lower()}:{port}"
    except ValueError:
        return ""
