"""The live WebSocket (channels.testing.WebsocketCommunicator against config.asgi.application):
session auth, Origin check, tenant scoping of events, membership re-checked before each push."""

import asyncio

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from apps.core.events import channel_for, encode, runs_changed
from apps.jobs.models import JobRun, RunStatus
from apps.tenants.models import Membership
from config.asgi import application

from .conftest import logged_in, make_run

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("redis_reachable")]

ORIGIN = b"http://127.0.0.1"


def session_of(user) -> str:
    """A logged-in session id (made before the async part: the ORM is sync)."""
    return logged_in(user).cookies["sessionid"].value


def communicator(session=None, query="view=runs&since=0", origin=ORIGIN):
    headers = [(b"host", b"127.0.0.1"), (b"origin", origin)]
    if session is not None:
        headers.append((b"cookie", f"sessionid={session}".encode()))
    return WebsocketCommunicator(application, f"/ws/live/?{query}", headers=headers)


def run_async(coroutine_function):
    return async_to_sync(coroutine_function)()


def test_it_rejects_anonymous_users(tenant):
    async def scenario():
        socket = communicator()
        connected, _ = await socket.connect()
        assert not connected

    run_async(scenario)


def test_it_rejects_another_origin(owner):
    session = session_of(owner)

    async def scenario():
        socket = communicator(session, origin=b"http://evil.example")
        connected, _ = await socket.connect()
        assert not connected

    run_async(scenario)


def test_it_rejects_a_bad_view_and_another_tenants_job(owner, other_job):
    session = session_of(owner)

    async def scenario():
        for query in ("view=nope", f"view=job&job={other_job.id}&since=0", "view=runs&since=x", "view=runs&tz=Nope/x"):
            socket = communicator(session, query=query)
            connected, _ = await socket.connect()
            assert not connected, query

    run_async(scenario)


def test_it_pushes_rows_of_the_users_tenant_only(owner, job, other_job):
    mine = make_run(job, status=RunStatus.RUNNING)
    theirs = make_run(other_job, status=RunStatus.RUNNING)

    session = session_of(owner)

    async def scenario():
        socket = communicator(session, query="view=runs&since=0&tz=Asia/Tokyo")
        connected, _ = await socket.connect()
        assert connected
        # Tenant B's events go to B's channel: this socket is not subscribed to it.
        runs_changed([(other_job.tenant_id, theirs.id, "running")])
        # Even an event forged onto A's channel cannot show B's run: rows are re-read within A.
        import redis
        from django.conf import settings

        redis.Redis.from_url(settings.REDIS_URL).publish(channel_for(job.tenant_id), encode([(str(theirs.id), "x")]))
        assert await socket.receive_nothing(timeout=0.5)
        runs_changed([(job.tenant_id, mine.id, "running")])
        message = await socket.receive_json_from(timeout=3)
        (row,) = message["rows"]
        assert row["id"] == f"run-{mine.id}"
        assert row["insert"] is True and 'data-status="running"' in row["html"] and "nightly-report" in row["html"]
        assert "globex" not in str(message)
        assert " JST</time>" in row["html"]  # in the zone the page was rendered in
        await socket.disconnect()

    run_async(scenario)


def test_rows_for_the_jobs_page_are_job_rows(owner, job):
    run = make_run(job, status=RunStatus.FAILED, error="HTTP 500")

    session = session_of(owner)

    async def scenario():
        socket = communicator(session, query="view=jobs&since=0")
        assert (await socket.connect())[0]
        runs_changed([(job.tenant_id, run.id)])
        message = await socket.receive_json_from(timeout=3)
        assert message["rows"][0]["id"] == f"job-{job.id}" and message["rows"][0]["insert"] is False
        assert "status-failed" in message["rows"][0]["html"]
        await socket.disconnect()

    run_async(scenario)


def test_a_burst_asks_the_page_to_refresh_its_table(owner, job):
    session = session_of(owner)

    async def scenario():
        socket = communicator(session)
        assert (await socket.connect())[0]
        runs_changed([(job.tenant_id, f"00000000-0000-0000-0000-{i:012d}") for i in range(500)])
        assert await socket.receive_json_from(timeout=3) == {"refresh": True}
        await socket.disconnect()

    run_async(scenario)


def test_a_removed_member_is_disconnected_at_the_next_event(owner, tenant, job):
    run = make_run(job)

    session = session_of(owner)

    async def scenario():
        socket = communicator(session)
        assert (await socket.connect())[0]
        from channels.db import database_sync_to_async

        await database_sync_to_async(Membership.objects.filter(user=owner, tenant=tenant).delete)()
        runs_changed([(job.tenant_id, run.id)])
        output = await socket.receive_output(timeout=3)
        assert output == {"type": "websocket.close", "code": 4403}

    run_async(scenario)


def test_a_row_is_not_pushed_again_unchanged(owner, job):
    """A run's events may arrive in separate batches after the page already shows their outcome:
    the row is pushed once, not redrawn under the user (its checkbox unticked) for each event."""
    run = make_run(job, status=RunStatus.FAILED, error="HTTP 500")
    session = session_of(owner)

    async def scenario():
        socket = communicator(session)
        assert (await socket.connect())[0]
        runs_changed([(job.tenant_id, run.id)])
        (row,) = (await socket.receive_json_from(timeout=3))["rows"]
        assert row["id"] == f"run-{run.id}" and 'data-status="failed"' in row["html"]
        runs_changed([(job.tenant_id, run.id, "failed")])  # the same outcome, announced again
        assert await socket.receive_nothing(timeout=0.5)
        await database_sync_to_async(JobRun.objects.filter(pk=run.pk).update)(status=RunStatus.QUEUED)
        runs_changed([(job.tenant_id, run.id, "queued")])
        (row,) = (await socket.receive_json_from(timeout=3))["rows"]
        assert 'data-status="queued"' in row["html"]
        await socket.disconnect()

    run_async(scenario)


def blocking_pops_on_this_db() -> int:
    """Redis clients of this test database sitting in a blocking pop (channels_redis' receive loop)."""
    import redis
    from django.conf import settings

    client = redis.Redis.from_url(settings.REDIS_URL)
    db = client.connection_pool.connection_kwargs.get("db", 0)
    return sum(1 for c in client.client_list() if int(c["db"]) == db and c["cmd"] in ("bzpopmin", "blpop", "brpop"))


def test_a_live_socket_waits_on_no_channel_layer(owner):
    """Its events come over Redis pub/sub (apps/core/events.py). Channels' default gave every socket
    a channel-layer channel too, with channels_redis' blocking pop waiting on it: a Redis connection
    per socket for nothing, and a receive loop to cancel when the socket closed (one such cancel
    never returned in CI and hung a test for 300 s)."""
    session = session_of(owner)
    before = blocking_pops_on_this_db()

    async def scenario():
        socket = communicator(session)
        assert (await socket.connect())[0]
        await asyncio.sleep(0.5)  # the consumer's dispatch loop is waiting by now
        pops = await sync_to_async(blocking_pops_on_this_db)()
        await socket.disconnect()
        return pops

    assert run_async(scenario) == before
