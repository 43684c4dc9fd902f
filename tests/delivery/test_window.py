"""The delivery window of a worker process (apps/delivery/window.py), in-process: real
PostgreSQL, a real receiver on 127.0.0.1 that counts the requests it holds at once, the real
transport. The killed-worker case runs a real Celery worker process."""

import signal
import threading
import time

import pytest

from apps.delivery import draining
from apps.delivery.services import admit_runs, deliver_runs
from apps.delivery.window import get_window
from apps.delivery.window_rows import Ticket, host_of
from apps.jobs.models import ErrorKind, JobRun, RunAttempt, RunStatus
from apps.tenants.services import tenant_create
from tests.factories import JobFactory, queued_runs
from tests.scenarios.conftest import FAST
from tests.support.processes import start_scheduler, start_worker, wait_until
from tests.support.receiver import Reply

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def not_draining():
    draining.reset()
    yield
    draining.reset()


class Concurrency:
    """A receiver reply that holds each request and records how many were held at once."""

    def __init__(self, hold_seconds: float, hold=lambda delivery: True):
        self.hold_seconds, self.hold = hold_seconds, hold
        self.now = self.most = 0
        self._lock = threading.Lock()

    def __call__(self, delivery) -> Reply:
        if not self.hold(delivery):
            return Reply()
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)
        time.sleep(self.hold_seconds)
        with self._lock:
            self.now -= 1
        return Reply()


def ids(runs) -> list[str]:
    return [str(run.id) for run in runs]


def test_a_tenant_holds_at_most_its_share_of_the_window(tenant, receiver, settings):
    settings.CHIME_WORKER_MAX_IN_FLIGHT_PER_TENANT = 3
    receiver.respond = held = Concurrency(0.5)
    runs = queued_runs(JobFactory(tenant=tenant, target_url=f"{receiver.url}/hook"), 10)
    report = deliver_runs(ids(runs))
    assert report.as_dict() == {"claimed": 10, "outcomes": {"succeeded": 10}}
    assert held.most == 3, "never more than the tenant's share in flight, and the share was used"
    assert len(receiver.received()) == 10


def test_the_window_holds_at_most_its_size_and_refills_as_requests_end(tenant, receiver, settings):
    """More runs than the window: a synchronous caller makes room by recording its own runs."""
    settings.CHIME_WORKER_MAX_IN_FLIGHT = 4
    receiver.respond = held = Concurrency(0.3)
    tenants = [tenant, tenant_create(slug="initech", name="Initech")]
    runs = [run for t in tenants for run in queued_runs(JobFactory(tenant=t, target_url=f"{receiver.url}/h"), 7)]
    report = deliver_runs(ids(runs))
    assert report.outcomes["succeeded"] == 14
    assert held.most == 4


def test_an_endpoint_host_holds_at_most_its_share_across_tenants(tenant, receiver, settings):
    settings.CHIME_WORKER_MAX_IN_FLIGHT_PER_HOST = 4
    receiver.respond = held = Concurrency(0.5)
    other = tenant_create(slug="initech", name="Initech")
    runs = queued_runs(JobFactory(tenant=tenant, target_url=f"{receiver.url}/a"), 6)
    runs += queued_runs(JobFactory(tenant=other, target_url=f"{receiver.url}/b"), 6)
    report = deliver_runs(ids(runs))
    assert report.outcomes["succeeded"] == 12
    assert held.most == 4


def test_a_landed_response_frees_its_shares_before_its_outcome_is_recorded(tenant, receiver, settings):
    """The tenant's and host's shares count requests their endpoint is answering; the window's slot
    counts what the process holds unrecorded. Held until the recording, a fast host's share was
    Chime's own bookkeeping, and the limit of a spike aimed at one host (issue #12)."""
    settings.CHIME_WORKER_MAX_IN_FLIGHT_PER_HOST = 1
    receiver.respond = held = Concurrency(0.3)
    runs = queued_runs(JobFactory(tenant=tenant, target_url=f"{receiver.url}/hook"), 2)
    window, ticket, host = get_window(), Ticket(ids(runs)), host_of(receiver.url)
    window.admit(ids(runs), ticket=ticket)  # both claimed: one out, one waiting behind the host's share
    shares = window._shares
    with window._cond:
        assert (shares.by_host[host], shares.held_by_host[host], shares.slots) == (1, 2, 2)
        assert len(shares.waiting[host]) == 1
    # This thread records the ticket's outcomes (serve): until it does, landed ones wait here. The
    # second request went out when the first landed, not when its outcome was recorded.
    wait_until(lambda: ticket.ended.qsize() == 2, timeout=10, message="both responses landed")
    with window._cond:
        assert not shares.by_host and not shares.held_by_host and not shares.by_tenant, "shares free"
        assert not shares.waiting
        assert shares.slots == 2, "the slots are held until the outcomes are recorded"
    assert held.most == 1, "the endpoint never had more than the host's share at once"
    window.serve(ticket, timeout_seconds=30)
    assert ticket.report.outcomes == {"succeeded": 2}
    with window._cond:
        assert shares.slots == 0 and not shares.by_host and not shares.by_tenant


def test_a_hosts_runs_claimed_past_its_share_wait_and_go_out_as_its_requests_land(tenant, receiver, settings):
    """What a host may hold is its share out and as many again claimed behind them; the claimed ones
    go out one per landing, and the rest are parked, not claimed."""
    settings.CHIME_WORKER_MAX_IN_FLIGHT_PER_HOST = 2
    receiver.respond = held = Concurrency(0.3)
    runs = queued_runs(JobFactory(tenant=tenant, target_url=f"{receiver.url}/hook"), 7)
    window, ticket, host = get_window(), Ticket(ids(runs)), host_of(receiver.url)
    window.admit(ids(runs), ticket=ticket)
    with window._cond:
        assert (window._shares.by_host[host], window._shares.held_by_host[host]) == (2, 4)
        assert len(window._parking) == 3, "past twice the host's share, runs are parked unclaimed"
    assert JobRun.objects.filter(status=RunStatus.RUNNING).count() == 4
    window.serve(ticket, timeout_seconds=30)
    assert ticket.report.outcomes == {"succeeded": 7}
    assert held.most == 2
    assert sorted(d.webhook_id for d in receiver.received()) == sorted(ids(runs)), "each once"


def test_claimed_runs_still_waiting_when_the_grace_ends_are_recorded_interrupted(tenant, receiver, settings):
    """A shutdown past its grace interrupts what is out and what was claimed but never sent: both
    are recorded as interrupted (deliverable again at once), none is left holding its slot."""
    settings.CHIME_WORKER_MAX_IN_FLIGHT_PER_HOST = 1
    receiver.respond = Concurrency(5)
    runs = queued_runs(JobFactory(tenant=tenant, target_url=f"{receiver.url}/hook", timeout_seconds=60), 2)
    window, ticket = get_window(), Ticket(ids(runs))
    window.admit(ids(runs), ticket=ticket)
    wait_until(lambda: len(receiver.received()) == 1, timeout=10, message="the first request is out")
    window._interrupt_all()
    window.serve(ticket, timeout_seconds=30)
    assert ticket.report.outcomes == {"retrying": 2}
    assert len(receiver.received()) == 1, "the waiting one was never sent"
    assert window._shares.slots == 0 and not window._shares.held_by_host and not window._shares.waiting
    assert set(RunAttempt.objects.values_list("error_kind", flat=True)) == {ErrorKind.WORKER_LOST}


def test_parked_runs_of_a_host_with_room_go_out_past_those_of_a_full_one(tenant, receiver, settings):
    """Refilling from the parked runs skips a full host's and takes the next host's, in parking
    order, each host at its cap, both busy at once."""
    from tests.support.receiver import Receiver

    settings.CHIME_WORKER_MAX_IN_FLIGHT_PER_HOST = 2
    other = Receiver().start()  # another host:port
    try:
        receiver.respond, other.respond = held_a, held_b = Concurrency(0.4), Concurrency(0.4)
        a = queued_runs(JobFactory(tenant=tenant, target_url=f"{receiver.url}/a"), 6)
        b = queued_runs(JobFactory(tenant=tenant, target_url=f"{other.url}/b"), 6)
        report = deliver_runs(ids(a) + ids(b))  # B's runs parked behind all of A's
        assert report.outcomes["succeeded"] == 12
        assert held_a.most == held_b.most == 2
        first_b = min(d.received_at for d in other.received())
        last_a = max(d.received_at for d in receiver.received())
        assert first_b < last_a - 0.5, "B's runs went out while A's were still going out"
        assert sorted(d.webhook_id for d in other.received()) == sorted(ids(b)), "each of B's once"
    finally:
        other.stop()


def test_an_outcome_is_recorded_while_another_request_of_the_same_task_is_out(tenant, receiver):
    job = JobFactory(tenant=tenant, target_url=f"{receiver.url}/hook", timeout_seconds=30)
    quick, slow = queued_runs(job, 2)
    receiver.respond = Concurrency(8, hold=lambda d: d.webhook_id == str(slow.id))
    started = time.monotonic()
    report = admit_runs(ids([quick, slow]))  # what the Celery task does
    assert report.claimed == 2
    assert time.monotonic() - started < 5, "the task returned once its runs were admitted"
    wait_until(
        lambda: JobRun.objects.filter(id=quick.id, status=RunStatus.SUCCEEDED).exists(),
        timeout=5,
        message="the quick run recorded",
    )
    slow.refresh_from_db()
    assert slow.status == RunStatus.RUNNING, "recorded while the slow request of the same task was still out"
    wait_until(
        lambda: JobRun.objects.filter(id=slow.id, status=RunStatus.SUCCEEDED).exists(), timeout=20, message="slow one"
    )
    assert len(receiver.received()) == 2


def test_runs_that_cannot_be_built_fail_with_their_reason_beside_healthy_ones(tenant, receiver):
    good = queued_runs(JobFactory(tenant=tenant, target_url=f"{receiver.url}/ok"), 3)
    bad_headers = JobFactory(tenant=tenant, target_url=f"{receiver.url}/x")
    type(bad_headers).objects.filter(id=bad_headers.id).update(target_headers=["not", "a", "mapping"])
    bad_timeout = JobFactory(tenant=tenant, target_url=f"{receiver.url}/y")
    type(bad_timeout).objects.filter(id=bad_timeout.id).update(timeout_seconds=0)
    bad_url = JobFactory(tenant=tenant, target_url="http://[::1/hook")
    broken = [queued_runs(job, 1)[0] for job in (bad_headers, bad_timeout, bad_url)]
    report = deliver_runs(ids(good[:2] + broken + good[2:]))
    assert report.outcomes["succeeded"] == 3 and report.outcomes["failed"] == 3, report.as_dict()
    assert {d.path for d in receiver.received()} == {"/ok"}
    for run in broken:
        run.refresh_from_db()
        assert run.status == RunStatus.FAILED and run.lease_owner == ""
        assert run.attempts.get().error_kind == ErrorKind.INVALID_TARGET
    assert "could not be built" in JobRun.objects.get(id=broken[0].id).status_reason
    assert "could not be built" in JobRun.objects.get(id=broken[1].id).status_reason
    assert "invalid" in JobRun.objects.get(id=broken[2].id).status_reason.lower()


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_a_worker_killed_mid_window_has_its_runs_delivered_again(tenant, receiver, redis_required):
    """In flight (claimed, leased) and parked (still `queued`) runs of a SIGKILLed worker process
    are all delivered: the lease sweep and the requeue sweep recover them."""
    first_seen: set[str] = set()
    lock = threading.Lock()

    def hold_first_delivery(delivery):
        with lock:
            first = delivery.webhook_id not in first_seen
            first_seen.add(delivery.webhook_id)
        if first:
            time.sleep(60)
        return Reply()

    receiver.respond = hold_first_delivery
    runs = queued_runs(JobFactory(tenant=tenant, target_url=f"{receiver.url}/hook", retry_max_attempts=3), 8)
    JobRun.objects.filter(id__in=ids(runs)).update(status=RunStatus.SCHEDULED, queued_at=None)
    caps = {"CHIME_WORKER_MAX_IN_FLIGHT_PER_TENANT": "5"}  # 5 in flight, 3 parked
    victim = start_worker(name="victim", queues="runs.high,runs.default", concurrency=1, **FAST, **caps)
    scheduler = start_scheduler(**FAST)
    rescuer = None
    try:
        wait_until(lambda: len(receiver.received()) >= 5, timeout=30, message="the window is full")
        victim.kill(signal.SIGKILL)
        victim.stop()
        rescuer = start_worker(name="rescuer", queues="runs.high,runs.default", **FAST)
        wait_until(
            lambda: JobRun.objects.filter(id__in=ids(runs), status=RunStatus.SUCCEEDED).count() == len(runs),
            timeout=90,
            message="every run delivered",
        )
    finally:
        scheduler.stop()
        if rescuer is not None:
            rescuer.stop()
    delivered = {d.webhook_id for d in receiver.received()}
    assert delivered == set(ids(runs)), "every run delivered, each with its own webhook-id"
    lost = JobRun.objects.filter(id__in=ids(runs), attempts__error_kind=ErrorKind.WORKER_LOST).count()
    assert lost >= 5, "the runs in flight were recovered by the lease sweep"


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_runs_over_their_share_past_the_parking_go_back_to_the_broker_not_to_the_sweep(
    tenant, receiver, redis_required
):
    """A process that can neither send nor park a run hands it back to the broker a moment later.

    Every run aims at one host: 2 in flight, 2 parked, the other 8 of the message overflow. They
    used to stay `queued` with no message until the requeue sweep (30 s by default; here there is
    no scheduler at all, so they would never move). Now they come back from the broker and are
    delivered, each once."""
    from apps.delivery.enqueue import publish_runs

    receiver.respond = held = Concurrency(0.3)
    runs = queued_runs(JobFactory(tenant=tenant, target_url=f"{receiver.url}/hook"), 12)
    caps = {"CHIME_WORKER_MAX_IN_FLIGHT_PER_HOST": "2", "CHIME_WORKER_MAX_PARKED": "2",
            "CHIME_WORKER_OVERFLOW_SECONDS": "0.5"}  # fmt: skip
    worker = start_worker(name="overflow", queues="runs.default", concurrency=1, **FAST, **caps)
    try:
        publish_runs(ids(runs), priority="default")
        wait_until(
            lambda: JobRun.objects.filter(id__in=ids(runs), status=RunStatus.SUCCEEDED).count() == len(runs),
            timeout=45,
            message="every run delivered without a sweep",
        )
    finally:
        worker.stop()
    assert sorted(d.webhook_id for d in receiver.received()) == sorted(ids(runs)), "each run delivered once"
    assert held.most == 2, "the host's share held throughout"


def sessions_opened() -> int:
    """Connections ever opened to this database (PostgreSQL's own counter, PG 14+)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute("SELECT sessions FROM pg_stat_database WHERE datname = current_database()")
        return cursor.fetchone()[0]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_worker_keeps_its_connections_from_one_message_to_the_next(tenant, receiver, redis_required):
    """A task returns once its runs are admitted, and the window records them in its own threads,
    on the process's connection pool. Celery's Django fixup used to close that whole pool at every
    task start and end (config/celery.py): under the recorder and the lease renewer ("the pool
    ... is closed", recording in its outage-retry loop), and with a new PostgreSQL connection or
    two for every message. Now twelve messages in a row are recorded on the pool's few
    connections."""
    from apps.delivery.enqueue import publish_runs

    job = JobFactory(tenant=tenant, target_url=f"{receiver.url}/hook")
    runs = queued_runs(job, 12)
    worker = start_worker(name="pool", queues="runs.high,runs.default", concurrency=1, **FAST)
    try:
        publish_runs(ids(runs[:1]), priority=runs[0].priority)  # the child opens its pool
        wait_until(lambda: JobRun.objects.filter(id=runs[0].id, status=RunStatus.SUCCEEDED).exists(), timeout=30)
        time.sleep(1)
        before = sessions_opened()
        for run in runs[1:]:  # one message at a time: eleven task starts and ends
            publish_runs([str(run.id)], priority=run.priority)
            done = JobRun.objects.filter(id=run.id, status=RunStatus.SUCCEEDED)
            wait_until(done.exists, timeout=30)
        time.sleep(1)
        opened = sessions_opened() - before
    finally:
        worker.stop()
    assert opened <= 4, f"{opened} new connections for 11 messages (the pool holds at most 4)"
    log = worker.log()
    assert "is closed" not in log and "database unavailable" not in log, log[-3000:]


def test_delivered_runs_are_freed_without_the_garbage_collector(tenant, receiver):
    """A landed flight (its run, job, request and response) is freed by reference counting: its
    future's done-callback used to hold it in a cycle that only the collector could free, ~34
    objects a run, and the collector's full walks were a third of a worker child's CPU at a spike
    (apps/core/heap.py, docs/benchmarks.md)."""
    import gc

    from apps.delivery.window_rows import Flight

    runs = queued_runs(JobFactory(tenant=tenant, target_url=f"{receiver.url}/hook"), 20)
    gc.collect()
    gc.disable()
    try:
        report = deliver_runs(ids(runs))
        assert report.outcomes == {"succeeded": 20}
        left = [o for o in gc.get_objects() if type(o) is Flight]  # type(): dead weak proxies are about
    finally:
        gc.enable()
    assert left == [], f"{len(left)} flights still alive: held in reference cycles"


def test_the_claims_live_events_leave_through_the_publisher_thread(tenant, receiver, monkeypatch):
    """The admitting thread (a Celery task's) does not wait on Redis for its claims' events: they
    go out through the process's publisher thread, like the recorder's."""
    from collections import defaultdict

    from apps.core import events

    monkeypatch.setattr(events, "_down_until", 0.0)  # an earlier test may have left Redis alone
    published_by = defaultdict(set)  # thread name -> this tenant's run ids it published
    publish = events._publish

    def watched(changes):
        changes = list(changes)
        name = threading.current_thread().name
        published_by[name].update(str(c[1]) for c in changes if str(c[0]) == str(tenant.id))
        publish(changes)

    monkeypatch.setattr(events, "_publish", watched)
    runs = queued_runs(JobFactory(tenant=tenant, target_url=f"{receiver.url}/hook"), 5)
    assert deliver_runs(ids(runs)).outcomes == {"succeeded": 5}
    wait_until(lambda: set(ids(runs)) <= published_by["chime-events"], timeout=5, message="events published")
    assert {name for name, runs in published_by.items() if runs} == {"chime-events"}


def test_a_draining_window_hands_back_at_once_the_runs_waiting_behind_their_hosts_share(tenant, receiver, settings):
    """A shutdown does not wait for a host's answers to send what was claimed behind them: those
    runs go back to `queued` (attempt uncharged, never sent) while the one out finishes."""
    settings.CHIME_WORKER_MAX_IN_FLIGHT_PER_HOST = 1
    receiver.respond = Concurrency(1.0)
    runs = queued_runs(JobFactory(tenant=tenant, target_url=f"{receiver.url}/hook"), 2)
    window, ticket = get_window(), Ticket(ids(runs))
    window.admit(ids(runs), ticket=ticket)  # one out, one claimed and waiting
    draining.start_draining()
    window.serve(ticket, timeout_seconds=30)
    assert ticket.report.outcomes == {"succeeded": 1, "handed_back": 1}
    (sent,) = receiver.received()
    waited = JobRun.objects.exclude(id=sent.webhook_id).get()
    assert (waited.status, waited.attempt_count, waited.lease_owner) == (RunStatus.QUEUED, 0, "")
    assert window._shares.slots == 0 and not window._shares.waiting and not window._flights


def test_a_drain_past_its_grace_logs_what_it_still_holds(tenant, receiver, settings, monkeypatch, caplog):
    """The fault suite once saw a worker whose shutdown overran its grace with no clue why: a drain
    still waiting DRAIN_REPORT_SECONDS after the grace logs its counts once (here the fault is a
    recording that hangs until the test lets it go)."""
    from apps.delivery import window as window_module

    settings.CHIME_WORKER_SHUTDOWN_GRACE_SECONDS = 0.1
    monkeypatch.setattr(window_module, "DRAIN_REPORT_SECONDS", 0.5)
    runs = queued_runs(JobFactory(tenant=tenant, target_url=f"{receiver.url}/hook"), 1)
    window = get_window()
    stuck, record = threading.Event(), window._record
    monkeypatch.setattr(window, "_record", lambda batch: (stuck.wait(30), record(batch)))
    admit_runs(ids(runs))
    wait_until(lambda: len(receiver.received()) == 1, timeout=10, message="the request is out")
    threading.Timer(2.0, stuck.set).start()
    with caplog.at_level("WARNING", logger="apps.delivery.window"):
        window.drain()
    (report,) = [r for r in caplog.records if "past the shutdown grace" in r.getMessage()]
    held = report.args
    assert (held["slots"], held["flights"], held["ended_unrecorded"]) == (1, 1, 0)
    assert held["recorder_alive"] and held["renewer_alive"]
    assert window._shares.slots == 0, "then recorded, and the drain ended"
    assert JobRun.objects.get().status == RunStatus.SUCCEEDED
