"""An idle WebSocket keeps working over the real Redis channel layer (issue 9).

Every Channels consumer, the live dashboard's too, waits on the channel layer between messages:
channels_redis does it with a blocking BZPOPMIN that Redis answers after 5 s. redis-py 8 made
`socket_timeout` default to 5 s, so the client gave up on that read just before Redis answered:
`redis.exceptions.TimeoutError: Timeout reading from 127.0.0.1:6379` in the consumer every ~5 s of
quiet, the socket closed, and the page missed whatever changed until it reconnected. These tests
keep a consumer idle for several of those cycles and then expect it to deliver, on the channel
layer of the settings (CHANNEL_LAYERS, config/settings/base.py) and the installed redis-py.
"""

import asyncio

import pytest
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator

from apps.core.events import runs_changed
from apps.jobs.models import RunStatus

from .conftest import make_run
from .test_consumer import communicator, run_async, session_of

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("redis_reachable")]

# More than twice channels_redis' 5 s blocking pop (and redis-py 8's 5 s default socket timeout).
IDLE_SECONDS = 12
GROUP = "chime-test-idle"


class GroupEcho(AsyncJsonWebsocketConsumer):
    """A consumer that only relays what its group receives: the channel layer is the thing tested."""

    groups = [GROUP]

    async def idle_ping(self, event):
        await self.send_json({"ping": event["n"]})


async def idle_then_receive(socket: WebsocketCommunicator, deliver, timeout: float = 5):
    """Stay quiet for IDLE_SECONDS (the consumer must not die meanwhile), then deliver and receive."""
    await asyncio.sleep(IDLE_SECONDS)
    if socket.future.done():
        error = socket.future.exception()
        pytest.fail(f"the consumer stopped while idle: {type(error).__module__}.{type(error).__name__}: {error}")
    await deliver()
    return await socket.receive_json_from(timeout=timeout)


def test_the_redis_channel_layer_is_in_use():
    from channels_redis.core import RedisChannelLayer

    assert isinstance(get_channel_layer(), RedisChannelLayer)


def test_an_idle_consumer_still_receives_its_group_messages():
    async def scenario():
        socket = WebsocketCommunicator(GroupEcho.as_asgi(), "/ws/echo/")
        connected, _ = await socket.connect()
        assert connected
        layer = get_channel_layer()
        message = await idle_then_receive(socket, lambda: layer.group_send(GROUP, {"type": "idle.ping", "n": 1}))
        assert message == {"ping": 1}
        # And again: the layer's receive loop went on after the first message too.
        message = await idle_then_receive(socket, lambda: layer.group_send(GROUP, {"type": "idle.ping", "n": 2}))
        assert message == {"ping": 2}
        await socket.disconnect()

    run_async(scenario)


def test_an_idle_live_socket_still_pushes_run_changes(owner, job):
    run = make_run(job, status=RunStatus.RUNNING)
    session = session_of(owner)

    async def publish():
        runs_changed([(job.tenant_id, run.id, "running")])

    async def scenario():
        socket = communicator(session)
        connected, _ = await socket.connect()
        assert connected
        message = await idle_then_receive(socket, publish)
        (row,) = message["rows"]
        assert row["id"] == f"run-{run.id}"
        await socket.disconnect()

    run_async(scenario)
