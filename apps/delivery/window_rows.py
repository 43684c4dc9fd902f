"""What the delivery window (apps/delivery/window.py) holds: a synchronous caller's `Ticket`, a
run admitted or parked (`Row`), a request in flight (`Flight`), the endpoint a run counts
against (`host_of`), and the counts its caps are checked against (`Shares`)."""

import functools
import queue
import threading
from collections import Counter, deque
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from django.conf import settings
from django.db import connection

from apps.core.prepared import id_array, prepared_cursor
from apps.jobs.models import ConcurrencyPolicy, JobRun, RunStatus
from apps.jobs.transitions import picked, status_fenced_sql

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
    sharing: bool = False  # counted in its tenant's share and its host's hold: from its claim until its response lands
    out: bool = False  # its request is out: counted in its host's share until its response lands


@dataclass(eq=False)
class Flight:
    row: Row
    run: JobRun
    request: WebhookRequest
    owner: str
    response: WebhookResponse | None = None
    future: object = field(default=None, repr=False)


class Shares:
    """What one process's window holds, counted against its caps (the one home of their rule):

    - its slots (CHIME_WORKER_MAX_IN_FLIGHT): a run holds one from its claim until its outcome is
      recorded, so they bound what a process holds unrecorded;
    - each tenant's share (CHIME_WORKER_MAX_IN_FLIGHT_PER_TENANT): its runs from their claim until
      their responses land;
    - each endpoint host's share (CHIME_WORKER_MAX_IN_FLIGHT_PER_HOST): the requests it is
      answering, from the moment each goes out until its response lands (`by_host`). Behind them a
      host may have as many runs again claimed and waiting to go out (`held_by_host` counts both),
      so that the next claim's round trip to the database overlaps the host's answers instead of
      adding to the time a request holds its share: counted from the claim, the share of a fast
      host was ~45 % Chime's own claim and signing (issue #12, a spike aimed at one host). A slow
      host holds at most twice its share of a window's slots; what its endpoint sees is its share.

    A claimed run waits (`wait`) when its host already has its share out, and goes out when one of
    them lands (`landed` returns it). Not thread-safe: the window's condition guards it."""

    def __init__(self) -> None:
        self.slots = 0
        self.by_tenant: Counter = Counter()
        self.by_host: Counter = Counter()  # requests out
        self.held_by_host: Counter = Counter()  # claimed and not landed: out, or waiting to go out
        self.waiting: dict[str, deque] = {}  # host -> Flights claimed, waiting for a request of theirs to land

    @staticmethod
    def caps() -> tuple[int, int, int]:
        return (
            settings.CHIME_WORKER_MAX_IN_FLIGHT,
            settings.CHIME_WORKER_MAX_IN_FLIGHT_PER_TENANT,
            settings.CHIME_WORKER_MAX_IN_FLIGHT_PER_HOST,
        )

    def host_full(self, host: str, per_host: int) -> bool:
        """No more of this host's runs may be claimed: its share out and as many waiting."""
        return bool(host) and self.held_by_host[host] >= 2 * per_host

    def over(self, row: Row, caps: tuple[int, int, int]) -> bool:
        """Would claiming `row` exceed its tenant's share or what its host may hold?"""
        _total, per_tenant, per_host = caps
        return self.by_tenant[row.tenant] >= per_tenant or self.host_full(row.host, per_host)

    def take(self, row: Row) -> None:
        self.slots += 1
        self.by_tenant[row.tenant] += 1
        self.held_by_host[row.host] += 1
        row.sharing = True

    def send_or_wait(self, flights: list[Flight], per_host: int) -> list[Flight]:
        """Of these claimed flights, those whose host has room go out (returned, counted in its
        share); the others wait, in claim order, for a request of their host to land."""
        go = []
        for flight in flights:
            host = flight.row.host
            if host and (self.by_host[host] >= per_host or self.waiting.get(host)):
                self.waiting.setdefault(host, deque()).append(flight)
            else:
                self._out(flight)
                go.append(flight)
        return go

    def _out(self, flight: Flight) -> None:
        self.by_host[flight.row.host] += 1
        flight.row.out = True

    def landed(self, row: Row) -> list[Flight]:
        """Its response is in (or it will not go out): out of its tenant's and host's shares, its
        slot still taken. Returns the flights of its host that may go out now."""
        if not row.sharing:
            return []
        row.sharing = False
        _drop(self.by_tenant, row.tenant)
        _drop(self.held_by_host, row.host)
        if not row.out:
            return []
        row.out = False
        _drop(self.by_host, row.host)
        waiting = self.waiting.get(row.host)
        go = []
        while waiting and self.by_host[row.host] < settings.CHIME_WORKER_MAX_IN_FLIGHT_PER_HOST:
            flight = waiting.popleft()
            self._out(flight)
            go.append(flight)
        if not waiting:
            self.waiting.pop(row.host, None)
        return go

    def take_waiting(self) -> list[Flight]:
        """Every flight still waiting to go out (a shutdown's grace is over): they never will."""
        flights = [flight for waiting in self.waiting.values() for flight in waiting]
        self.waiting.clear()
        return flights

    def counts(self) -> dict:
        return {
            "slots": self.slots,
            "tenants": len(self.by_tenant),
            "out": sum(self.by_host.values()),
            "held": sum(self.held_by_host.values()),
            "waiting": sum(len(waiting) for waiting in self.waiting.values()),
        }

    def free(self, row: Row) -> list[Flight]:
        """Recorded, or never sent: its slot, and its shares if it still held them."""
        self.slots -= 1
        return self.landed(row)


def _drop(counter: Counter, key: str) -> None:
    counter[key] -= 1
    if counter[key] <= 0:
        del counter[key]


@functools.lru_cache(maxsize=1024)  # bounded: a URL may be 2,000 characters
def host_of(url: str) -> str:
    """The endpoint a cap per host counts: host and port (an origin), as the connection pool does.
    Remembered per URL: every run of a job (and at a spike, of many jobs) names the same URL, and
    parsing it was ~1 µs of each run's admission (issue #12)."""
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return f"{(parts.hostname or '').lower()}:{port}"
    except ValueError:
        return ""


# The window's first read of a message's runs, as one fixed statement on PostgreSQL: built with
# the ORM, the `id IN (200 ids)` lookup prepared each id on its own and the query's compilation
# was ~8 % of a worker process's CPU in a spike (py-spy --gil, issue #12).
# The ids come back as text: they are used as strings, and building a UUID per id only to format
# it again was ~1.3 % of that process's CPU.
PEEK_SQL = f"""
SELECT r.id::text, r.tenant_id::text, r.priority, d.target_url, r.definition_id::text, d.concurrency_policy
  FROM jobs_jobrun AS r JOIN jobs_jobdefinition AS d ON d.id = r.definition_id
 WHERE r.id = ANY(%s::uuid[]) AND {status_fenced_sql(RunStatus.QUEUED, alias="r")}
 ORDER BY r.scheduled_for"""  # noqa: S608 (the interpolated text is a constant)


def queued_rows(run_ids, ticket: Ticket | None) -> list[Row]:
    """The runs among `run_ids` still `queued`, oldest occurrence first, as Rows (what the caps
    need: tenant, endpoint host, and the job if its concurrency policy guards it)."""
    if connection.vendor == "postgresql":
        with prepared_cursor() as cursor:
            cursor.execute(PEEK_SQL, [id_array(run_ids)])
            rows = cursor.fetchall()
    else:
        rows = (
            picked(run_ids, RunStatus.QUEUED)
            .values_list(
                "id",
                "tenant_id",
                "priority",
                "definition__target_url",
                "definition_id",
                "definition__concurrency_policy",
            )
            .order_by("scheduled_for")
        )
    return [
        Row(str(i), str(t), host_of(url), p, ticket, None if policy == ConcurrencyPolicy.ALLOW else job)
        for i, t, p, url, job, policy in rows
    ]
