"""The delivery window of one worker process: many requests in flight, each recorded as it ends.

A Celery task used to send its chunk of runs and return when the slowest request ended, so two
slow chunks held both worker processes and every tenant waited. Now a task only *admits* its runs
into this process's window and returns (docs/architecture.md#the-delivery-window):

- a run is claimed only when there is room (window_rows.Shares): at most
  CHIME_WORKER_MAX_IN_FLIGHT runs per process, CHIME_WORKER_MAX_IN_FLIGHT_PER_TENANT per tenant,
  and per endpoint host CHIME_WORKER_MAX_IN_FLIGHT_PER_HOST requests out with as many again
  claimed behind them, each going out as one of its host's responses lands;
- a run over its tenant's or host's share is *parked* (apps/delivery/parking.py): not claimed (it
  stays `queued`, its message is acked) and kept by id until a slot of that tenant and host frees.
  If the process dies, the requeue sweep publishes it again (it is `queued` without a message);
- only a full window blocks the task: backpressure to Celery, other processes take the messages;
- the recorder thread records each outcome when its request ends (those that ended close together
  in one batch), frees the slots, claims parked runs into them, and interrupts what is still out
  once a shutdown's grace is over; the renewer thread renews the lease of every run in flight;
- before the process exits, `drain()` lets requests finish within the grace, records them and
  publishes the parked runs again, so a warm shutdown loses nothing and waits for no sweep.

At least once holds as before: a run is `running` under a lease from claim to record, so a process
that dies mid-window leaves runs that the lease sweep makes deliverable again (same webhook-id).
"""

import concurrent.futures
import logging
import queue
import threading
import time
from collections import defaultdict, deque

from django.conf import settings
from django.db import connection
from django.utils import timezone

from apps.core import events
from apps.core.dbretry import TRANSIENT, with_db_retry
from apps.core.ids import uuid_text
from apps.core.logs import log_fields
from apps.jobs.models import RunStatus
from apps.jobs.transitions import picked

from .claiming import claim_runs, lease_expiry
from .draining import grace_over, is_draining, start_draining
from .enqueue import by_priority, publish_runs
from .parking import Parking
from .preparing import (
    DeliveryReport,
    HandBack,
    build_request,
    cancel_unsendable,
    delivery_owner,
    fail_unbuildable,
    hand_back,
    still_mine,
)
from .recording import record_in_lock_order
from .transport import ERROR_INTERRUPTED, get_transport
from .webhook_types import ERROR_NETWORK, failed_response
from .window_rows import Flight, Row, Shares, Ticket, queued_rows

logger = logging.getLogger(__name__)

RECORD_BATCH = 200  # outcomes recorded in one transaction at most
POLL_SECONDS = 0.1
DRAIN_REPORT_SECONDS = 2.0  # past the grace, a drain still waiting logs what it holds


class Window:
    def __init__(self):
        self._cond = threading.Condition()
        self._shares = Shares()  # slots and shares: guarded by _cond
        self._flights: dict = {}  # run id -> Flight
        self._parking = Parking()  # runs over their share, not claimed: guarded by _cond
        self._ended: queue.SimpleQueue[Flight] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._recorder = threading.Thread(target=self._record_loop, name="chime-recorder", daemon=True)
        self._renewer = threading.Thread(target=self._renew_loop, name="chime-lease-renewer", daemon=True)
        self._recorder.start()
        self._renewer.start()

    # -- slots -------------------------------------------------------------------------------

    def _free(self, rows) -> None:
        go = []
        with self._cond:
            for row in rows:
                go += self._shares.free(row)
            self._cond.notify_all()
        self._send(go)

    def in_flight(self) -> int:
        with self._cond:
            return len(self._flights)

    # -- admission ---------------------------------------------------------------------------

    def admit(self, run_ids: list[str], *, ticket: Ticket | None = None) -> DeliveryReport:
        """Claim and start what fits; park what is over its share; block only while the window
        is full. Raises HandBack (the message goes back to the broker) when the worker is
        draining or the database stays away before anything of the message was claimed."""
        if is_draining():
            raise HandBack("worker is shutting down")
        report = DeliveryReport()
        try:
            rows = with_db_retry(
                lambda: queued_rows(run_ids, ticket), what="reading runs", deadline_seconds=_patience()
            )
        except TRANSIENT as exc:
            raise HandBack("database unavailable while claiming") from exc
        if ticket is not None:
            ticket.settle(set(map(str, run_ids)) - {row.run_id for row in rows})
        pending = deque(rows)
        caps = Shares.caps()
        total = caps[0]
        # A full window is refilled a batch at a time, not run by run: each claim is a few
        # statements, whatever its size.
        batch = max(1, total // 10)
        while pending:
            take, full = [], False
            with self._cond:
                while pending:
                    row = pending[0]
                    if row.run_id in self._parking:
                        pending.popleft()  # a copy of a message we already hold
                        if ticket is not None:
                            ticket.settle([row.run_id])
                    elif self._shares.over(row, caps):
                        self._parking.park(pending.popleft())
                    elif (free := total - self._shares.slots) > 0 and (take or free >= min(len(pending), batch)):
                        self._shares.take(pending.popleft())
                        take.append(row)
                    else:
                        full = True
                        break
                if full and not take:
                    if is_draining():
                        # Nothing of these was claimed: back to the broker with the message.
                        raise HandBack("worker is shutting down")
                    if ticket is None:
                        self._cond.wait(POLL_SECONDS)
            if take:
                report.claimed += self._launch(take, ticket=ticket, handing_back_ok=not report.claimed)
            elif full and ticket is not None:
                # A synchronous caller records its own runs: make room by doing so.
                self._step(ticket.ended, ticket=ticket)
        return report

    def _hand_back_overflow(self, *, everything: bool = False) -> int:
        """Publish again the overflow runs that waited CHIME_WORKER_OVERFLOW_SECONDS (all of
        them when draining; Parking.due_overflow). Still `queued`, so the queue budget keeps
        counting them; if publishing fails, the requeue sweep does it."""
        with self._cond:
            rows = self._parking.due_overflow(everything=everything)
        for priority, run_ids in by_priority((row.run_id, row.priority) for row in rows).items():
            try:
                publish_runs(run_ids, priority=priority)
            except Exception:
                logger.warning("could not hand back %d runs over their share; the requeue sweep will", len(run_ids))
        return len(rows)

    def _launch(self, rows: list[Row], *, ticket: Ticket | None, handing_back_ok: bool) -> int:
        """Claim the rows (their slots are taken), then start a request for each claimed run.
        Returns how many were claimed. Whatever happens, every row ends either in flight or
        released (its slot freed, its ticket told): a slot never leaks."""
        by_id = {row.run_id: row for row in rows}
        try:
            return self._claim_and_start(by_id, ticket=ticket, handing_back_ok=handing_back_ok)
        finally:
            self._release(list(by_id.values()))  # what was neither started nor released: a failure

    def _claim_and_start(self, by_id: dict, *, ticket: Ticket | None, handing_back_ok: bool) -> int:
        """Pops each row from `by_id` once it is released or in flight; `_launch` releases what
        is left if this raises."""
        owner = delivery_owner()
        report = ticket.report if ticket is not None else DeliveryReport()

        def release(run_ids, outcomes=None):
            self._release([by_id.pop(i) for i in list(run_ids) if i in by_id], outcomes)

        guarded_jobs = [row.guarded_job for row in by_id.values() if row.guarded_job is not None]
        try:
            # The claim's live events via the publisher thread (at admission they were published
            # here, ~2.5 % of CPU), handed over before any request goes out so that they cannot
            # follow the outcome's. Inside the recorder's step they go with the step's.
            with events.batched(background=True):
                runs = with_db_retry(
                    lambda: claim_runs(list(by_id), owner=owner, now=timezone.now(), guarded_jobs=guarded_jobs),
                    what="claiming runs",
                    deadline_seconds=_patience(),
                )
        except TRANSIENT as exc:
            release(list(by_id))
            if handing_back_ok:
                raise HandBack("database unavailable while claiming") from exc
            return 0  # left `queued`: the message is back with the broker or the sweep finds them
        claimed_at = time.monotonic()
        if len(runs) < len(by_id):  # some were taken elsewhere (the claim returns a subset of by_id)
            release(set(by_id) - {uuid_text(run.id) for run in runs})
        if ticket is not None:
            with ticket._lock:
                ticket.report.claimed += len(runs)
        if not runs:
            return 0
        try:
            to_send, secrets = with_db_retry(
                lambda: cancel_unsendable(runs, owner=owner, report=report),
                what="checking runs",
                deadline_seconds=_patience(),
            )
            if to_send and time.monotonic() - claimed_at > settings.CHIME_RUN_LEASE_RENEW_SECONDS:
                to_send = with_db_retry(
                    lambda: still_mine(to_send, owner=owner), what="renewing leases", deadline_seconds=10
                )
        except TRANSIENT:
            to_send = []  # the database stayed away: the leases expire and the sweep recovers the runs
        if len(to_send) < len(runs):  # cancelled, or no longer ours (to_send is a subset of runs)
            release({uuid_text(run.id) for run in runs} - {uuid_text(run.id) for run in to_send})
        if to_send and is_draining():
            hand_back(to_send, owner=owner)
            release([uuid_text(run.id) for run in to_send], {"handed_back": len(to_send)})
            return len(runs)
        now = timezone.now()
        flights: list[Flight] = []
        for run in to_send:
            run_id = uuid_text(run.id)
            try:
                request = build_request(run, secrets=secrets[run.tenant_id], now=now)
            except Exception as exc:
                logger.warning(
                    "run %s: request could not be built: %s", run.id, type(exc).__name__, extra=log_fields(run)
                )
                try:
                    with_db_retry(
                        lambda run=run, exc=exc: fail_unbuildable(run, exc, owner=owner, now=timezone.now()),
                        what="failing an unbuildable run",
                        deadline_seconds=_patience(),
                    )
                except Exception:
                    logger.exception(
                        "run %s: could not record why it failed; the lease sweep takes over",
                        run.id,
                        extra=log_fields(run),
                    )
                release([run_id], {RunStatus.FAILED: 1})
                continue
            flights.append(Flight(row=by_id[run_id], run=run, request=request, owner=owner))
        if flights:
            with self._cond:
                for flight in flights:
                    self._flights[flight.row.run_id] = flight
                    del by_id[flight.row.run_id]  # in flight: the recorder releases it
                go = self._shares.send_or_wait(flights, Shares.caps()[2])
            self._send(go)
        return len(runs)

    def _send(self, flights: list[Flight]) -> None:
        """Start these flights' requests (their host's share taken); each lands in `_landed`, or
        here if it fails at once, and what of its host was waiting goes out in the next round."""
        while flights:
            try:
                transport = get_transport(allow_private_networks=settings.WEBHOOK_ALLOW_PRIVATE_NETWORKS)
                futures = transport.submit_many([flight.request for flight in flights])
            except Exception:  # a transport that cannot start them: they fail and are recorded, no slot kept
                logger.exception("delivery window: could not start %d requests", len(flights))
                futures = [_failed(flight.request, "the worker could not start the request") for flight in flights]
            with self._cond:
                for flight, future in zip(flights, futures, strict=True):
                    flight.future = future
            next_round = []
            for flight, future in zip(flights, futures, strict=True):
                if future.done():
                    next_round += self._land(flight, future)
                else:
                    future.add_done_callback(lambda future, flight=flight: self._landed(flight, future))
            flights = next_round

    def _release(self, rows: list[Row], outcomes: dict | None = None) -> None:
        """Rows that will not be sent from here (taken elsewhere, cancelled, handed back)."""
        if rows:
            self._free(rows)
            self._settle_rows(rows, outcomes)

    @staticmethod
    def _settle_rows(rows: list[Row], outcomes: dict | None = None) -> None:
        by_ticket = defaultdict(list)
        for row in rows:
            if row.ticket is not None:
                by_ticket[row.ticket].append(row.run_id)
        for ticket, ids in by_ticket.items():
            ticket.settle(ids, outcomes)

    def _landed(self, flight: Flight, future) -> None:
        """On the transport's loop thread: hand the outcome to the recorder, and send what of its
        host was waiting for it. Never raises."""
        try:
            self._send(self._land(flight, future))
        except BaseException:
            logger.exception("delivery window: sending after a landing failed")

    def _land(self, flight: Flight, future) -> list[Flight]:
        """The flight's response in, its shares freed, its outcome queued for recording; returns
        the flights of its host that may go out now."""
        try:
            flight.response = future.result()
        except BaseException:  # cancelled by a shutdown past its grace (or a transport bug)
            flight.response = failed_response(flight.request, "interrupted: the worker shut down", ERROR_INTERRUPTED)
        flight.future = None  # its done-callback holds the flight: a cycle per run for the collector
        with self._cond:
            go = self._shares.landed(flight.row)
        (flight.row.ticket.ended if flight.row.ticket is not None else self._ended).put(flight)
        return go

    # -- recording ---------------------------------------------------------------------------

    def _record_loop(self) -> None:
        while not self._stop.is_set():
            batch = self._step(self._ended, ticket=None)
            if not batch and not self.in_flight():
                try:
                    connection.close()  # idle: give this thread's connection back
                except Exception:  # the recorder must outlive a connection that fails to close
                    logger.warning("delivery window: closing the recorder's idle connection failed", exc_info=True)

    def _step(self, ended: queue.SimpleQueue, *, ticket: Ticket | None) -> list:
        """Record what ended, then interrupt (grace over) or refill from the parked runs."""
        try:
            batch = [ended.get(timeout=POLL_SECONDS)]
        except queue.Empty:
            batch = []
        while batch and len(batch) < RECORD_BATCH:
            try:
                batch.append(ended.get_nowait())
            except queue.Empty:
                break
        try:
            with events.batched(background=True):  # the live events of the outcomes and the refill, at once
                if batch:
                    self._record(batch)
                if is_draining():
                    self._hand_back_waiting()
                if grace_over():
                    self._interrupt_all()
                elif not is_draining():
                    self._fill_from_parked(ticket)
                    if ticket is None and self._parking.overflow:
                        self._hand_back_overflow()
        except Exception:
            logger.exception("delivery window: recording step failed; going on")
        return batch

    def serve(self, ticket: Ticket, *, timeout_seconds: float) -> None:
        """A synchronous caller's loop: record its runs as they end, renew their leases, claim
        its parked runs into free slots, until every run of the ticket is settled."""
        deadline = time.monotonic() + timeout_seconds
        renewed = time.monotonic()
        while not ticket.done():
            if time.monotonic() > deadline:
                raise TimeoutError(f"runs still unsettled after {timeout_seconds:.0f} s")
            self._step(ticket.ended, ticket=ticket)
            if time.monotonic() - renewed >= settings.CHIME_RUN_LEASE_RENEW_SECONDS:
                renewed = time.monotonic()
                self._renew(ticket)

    def _record(self, batch: list[Flight]) -> None:
        by_owner = defaultdict(list)
        for flight in batch:
            by_owner[flight.owner].append(flight)
        for owner, flights in by_owner.items():
            deliveries = [(f.run, f.request, f.response) for f in flights]
            outcomes: dict = {}
            try:
                outcomes = with_db_retry(
                    lambda deliveries=deliveries, owner=owner: record_in_lock_order(deliveries, owner=owner),
                    what="recording outcomes",
                    deadline_seconds=_patience(),
                )
            except Exception:
                # Not recorded: the leases lapse (no longer renewed) and the sweep retries the runs.
                logger.exception("could not record %d outcomes; the lease sweep takes over", len(flights))
                outcomes = {"unrecorded": len(flights)}
            with self._cond:
                for flight in flights:
                    self._flights.pop(flight.row.run_id, None)
            self._release([f.row for f in flights], outcomes)

    def _hand_back_waiting(self) -> None:
        """Draining: claimed runs still waiting to go out are handed back at once (attempt
        uncharged), as a claim that finds the worker draining is; waiting would hold the shutdown."""
        with self._cond:
            flights = self._shares.take_waiting()
            for flight in flights:
                self._flights.pop(flight.row.run_id, None)
        if not flights:
            return
        by_owner = defaultdict(list)
        for flight in flights:
            by_owner[flight.owner].append(flight.run)
        for owner, runs in by_owner.items():
            try:
                with_db_retry(lambda r=runs, o=owner: hand_back(r, owner=o), what="handing back", deadline_seconds=10)
            except Exception:
                logger.warning("could not hand back %d claimed runs; their leases lapse for the sweep", len(runs))
        self._release([flight.row for flight in flights], {"handed_back": len(flights)})

    def _interrupt_all(self) -> None:
        """The shutdown grace is over: cancel what is still out; each comes back `interrupted`
        and is recorded as such (deliverable again at once, same webhook-id)."""
        with self._cond:
            flights = list(self._flights.values())
            waiting = self._shares.take_waiting()  # if not handed back (the database away): never sent
        for flight in waiting:
            unsent: concurrent.futures.Future = concurrent.futures.Future()
            unsent.cancel()
            self._land(flight, unsent)
        for flight in flights:
            future = flight.future  # read once: landing sets it to None on the transport's thread
            if future is not None and not future.done():
                future.cancel()

    def _fill_from_parked(self, ticket: Ticket | None) -> None:
        """Claim parked runs (of this ticket, or the tasks' ones) whose tenant and host have room."""
        with self._cond:
            take = self._parking.take_open(self._shares, ticket)
        if take:
            self._launch(take, ticket=ticket, handing_back_ok=False)

    # -- leases --------------------------------------------------------------------------------

    def _renew_loop(self) -> None:
        while not self._stop.wait(settings.CHIME_RUN_LEASE_RENEW_SECONDS):
            if self._renew(None):
                connection.close()

    def _renew(self, ticket: Ticket | None) -> bool:
        """Renew the leases of the runs in flight for this ticket (or for the tasks)."""
        with self._cond:
            flights = [(f.run.id, f.owner) for f in self._flights.values() if f.row.ticket is ticket]
        if not flights:
            return False
        try:
            picked([run_id for run_id, _ in flights], RunStatus.RUNNING).filter(
                lease_owner__in={owner for _, owner in flights}
            ).update(lease_expires_at=lease_expiry())
        except Exception as exc:
            # The next renewal, once the database answers, keeps the leases (the sweep gives
            # a restarted database a renewal period first: recover_expired_leases).
            logger.warning("renewing %d run leases failed (%s); trying again", len(flights), exc)
        return True

    # -- shutdown --------------------------------------------------------------------------------

    def drain(self) -> None:
        """Before the process exits: no new work, requests in flight get the shutdown grace (then
        are interrupted), every outcome is recorded, parked runs go back to the broker."""
        start_draining()
        with self._cond:
            parked = self._parking.clear()
        self._hand_back_overflow(everything=True)
        for priority, run_ids in by_priority((row.run_id, row.priority) for row in parked).items():
            try:
                publish_runs(run_ids, priority=priority)
            except Exception:
                logger.warning("could not publish %d parked runs; the requeue sweep will", len(run_ids))
        self._settle_rows(parked)
        grace = settings.CHIME_WORKER_SHUTDOWN_GRACE_SECONDS
        deadline, report_at = time.monotonic() + grace + 30, time.monotonic() + grace + DRAIN_REPORT_SECONDS
        with self._cond:
            while self._shares.slots and time.monotonic() < deadline:
                if report_at is not None and time.monotonic() >= report_at:
                    report_at = None  # once: a drain past its grace says what it still holds
                    logger.warning("delivery window: still holding runs past the shutdown grace: %s", self._held())
                self._cond.wait(POLL_SECONDS)
        self._stop.set()

    def _held(self) -> dict:
        """Counts only (no URL, no id): what a drain that overran waits for, beside the stacks
        `kill -USR2` dumps (docs/operations.md)."""
        flights = list(self._flights.values())
        return {
            **self._shares.counts(),
            "flights": len(flights),
            "flights_without_future": sum(1 for flight in flights if flight.future is None),
            "ended_unrecorded": self._ended.qsize(),
            "recorder_alive": self._recorder.is_alive(),
            "renewer_alive": self._renewer.is_alive(),
        }


def _failed(request, text: str) -> concurrent.futures.Future:
    future: concurrent.futures.Future = concurrent.futures.Future()
    future.set_result(failed_response(request, text, ERROR_NETWORK))
    return future


def _patience() -> float:
    return settings.CHIME_WORKER_DB_RETRY_SECONDS


_window: Window | None = None
_window_pid: int | None = None
_window_lock = threading.Lock()


def get_window() -> Window:
    """This process's window (a new one after fork: the parent's threads do not exist here)."""
    import os

    global _window, _window_pid
    with _window_lock:
        if _window is None or _window_pid != os.getpid() or _window._stop.is_set():
            _window, _window_pid = Window(), os.getpid()
        return _window


def drain_window() -> None:
    """worker_process_shutdown: drain this process's window if it has one."""
    import os

    with _window_lock:
        window = _window if _window_pid == os.getpid() else None
    if window is not None:
        window.drain()
