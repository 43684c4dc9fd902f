"""Runs a worker process admitted but may not claim yet: over their tenant's or host's share
(apps/delivery/window_rows.py `Shares`). They stay `queued` (their message acked) and wait here by
id until a slot of theirs frees; the window claims them from here (`take_open`). If the process
dies, the requeue sweep publishes them again (they are `queued` without a message).

Not thread-safe: the delivery window's condition guards it."""

import time
from collections import Counter, deque

from django.conf import settings

from .window_rows import Row, Shares, Ticket


class Parking:
    def __init__(self) -> None:
        self.rows: deque[Row] = deque()
        self.ids: set[str] = set()
        self.hosts: Counter = Counter()  # parked rows per host: a refill stops when all are full
        # Runs that found no place to park: (since, row), handed back to the broker after
        # CHIME_WORKER_OVERFLOW_SECONDS (Window._hand_back_overflow).
        self.overflow: deque[tuple[float, Row]] = deque()

    def __len__(self) -> int:
        return len(self.rows)

    def __contains__(self, run_id: str) -> bool:
        return run_id in self.ids

    def park(self, row: Row) -> None:
        """Keep a run that is over its tenant's or host's share until a slot of theirs frees.

        Past CHIME_WORKER_MAX_PARKED a task's run goes to the overflow, back to the broker a moment
        later, where any process, this one included, may take it when it has room. It used to be
        left `queued` without a message for the requeue sweep: with every run of a spike aimed at
        one host, 2-19 % of them waited ~30 s (docs/benchmarks.md)."""
        if len(self.rows) >= settings.CHIME_WORKER_MAX_PARKED:
            if row.ticket is not None:
                # A synchronous caller (eager mode) waits on its ticket: the sweep publishes it.
                row.ticket.settle([row.run_id], {"deferred": 1})
            else:
                self.overflow.append((time.monotonic(), row))
            return
        self.rows.append(row)
        self.ids.add(row.run_id)
        self.hosts[row.host] += 1

    def due_overflow(self, *, everything: bool = False) -> list[Row]:
        """The overflow runs that waited CHIME_WORKER_OVERFLOW_SECONDS (all of them if `everything`).
        Not at once: a process whose host shares stay full would take the same runs off the broker
        again and again."""
        cutoff = time.monotonic() - settings.CHIME_WORKER_OVERFLOW_SECONDS
        rows = []
        while self.overflow and (everything or self.overflow[0][0] <= cutoff):
            rows.append(self.overflow.popleft()[1])
        return rows

    def take_open(self, shares: Shares, ticket: Ticket | None) -> list[Row]:
        """The parked runs (of this ticket, or the tasks' ones) whose tenant and host have room,
        their shares taken, out of the parking.

        In parking order, and in time proportional to what it takes, not to what is parked: the
        recorder refills after every batch, and with thousands of runs parked behind one full
        host a scan of them all (the caps read per row) was ~8 % of a worker process's CPU in a
        spike (py-spy, issue #12). Hosts found full are skipped with a set lookup, and the scan
        stops once every host with parked runs is full."""
        if not self.rows:
            return []
        caps = Shares.caps()
        total, _per_tenant, per_host = caps
        open_hosts = {h for h in self.hosts if not shares.host_full(h, per_host)}
        take = []
        prefix = True  # every row taken so far, and no other, was at the front: pop them
        for index, row in enumerate(self.rows):
            if shares.slots >= total or not open_hosts:
                break
            if row.host not in open_hosts or row.ticket is not ticket:
                continue
            if shares.over(row, caps):
                if shares.host_full(row.host, per_host):
                    open_hosts.discard(row.host)
                continue
            shares.take(row)
            take.append(row)
            prefix = prefix and index == len(take) - 1
        if take:
            taken = {row.run_id for row in take}
            if prefix:
                for _ in take:
                    self.rows.popleft()
            else:
                self.rows = deque(row for row in self.rows if row.run_id not in taken)
            self.ids -= taken
            self.hosts.subtract(row.host for row in take)
            self.hosts = +self.hosts  # drop hosts with none left
        return take

    def clear(self) -> list[Row]:
        """Every parked run (not the overflow), out of the parking: a shutdown hands them back."""
        rows = list(self.rows)
        self.rows.clear()
        self.ids.clear()
        self.hosts.clear()
        return rows
