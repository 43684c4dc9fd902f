"""The live WebSocket: pushes re-rendered rows of the tenant's runs as they change.

Authenticated by the session (AuthMiddlewareStack), origin checked (AllowedHostsOriginValidator,
config/asgi.py). The tenant is resolved from the user's memberships at connect, and membership is
checked again before every push, so a user removed from a tenant stops receiving at once. Events
come from Redis pub/sub (apps/core/events.py): one subscription per socket, to its tenant's
channel only; they carry ids, and rows are re-read within the tenant before rendering.

Each socket holds one of its tenant's CHIME_QUOTA_MAX_LIVE_CONNECTIONS slots (apps/tenants/quotas.py),
counted in Redis: taken before accepting, renewed while open, given back on disconnect; a process
that dies without giving them back loses them when they expire. Over the cap the socket is refused
(4429); the page retries with its back-off (at most every 15 s).
"""

import asyncio
import logging
import uuid
from urllib.parse import parse_qsl

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from apps.core.events import channel_for, decode
from apps.tenants import quotas
from apps.tenants.accounts import membership_of

from .access import scope_membership
from .live import LiveView, job_in_tenant, render_rows
from .zones import viewer_zone_from_cookies, zone_or_none

logger = logging.getLogger(__name__)

BATCH_SECONDS = 0.1  # coalesce a burst of events into one push
# A bigger burst (a top-of-the-hour spike, a bulk replay) is not rendered row by row: the page is
# told to reload its table once instead, at most every REFRESH_SECONDS.
MAX_ROWS_PER_PUSH = 200
REFRESH_SECONDS = 2.0
# The rows this socket last pushed (id -> html), to skip pushing one again unchanged; forgotten
# past this many (a row pushed again then is only redrawn, as before).
MAX_REMEMBERED_ROWS = 2000
CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NO_LIVE_UPDATES = 4404
CLOSE_TOO_MANY_CONNECTIONS = 4429


class LiveConsumer(AsyncJsonWebsocketConsumer):
    # No channel layer (get_channel_layer(None) is None): events come over Redis pub/sub (above).
    # Channels' default gave every socket a layer channel with channels_redis' blocking pop waiting
    # on it, a Redis connection per socket for nothing and a receive loop to cancel at close; one
    # such cancel never returned in CI (tests/dashboard/test_consumer.py).
    channel_layer_alias = None
    pubsub = None
    redis = None
    listener = None
    slot = None  # the connection's id in its tenant's live-connection slots, while it holds one
    renewer = None
    pushed: dict | None = None

    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        view = LiveView.parse(dict(parse_qsl(self.scope.get("query_string", b"").decode("latin-1"))))
        membership = await database_sync_to_async(scope_membership)(user, self.scope["session"])
        if view is None or membership is None:
            await self.close(code=CLOSE_FORBIDDEN)
            return
        if view.job_id and not await database_sync_to_async(job_in_tenant)(membership.tenant_id, view.job_id):
            await self.close(code=CLOSE_FORBIDDEN)
            return
        if not settings.REDIS_URL:
            await self.close(code=CLOSE_NO_LIVE_UPDATES)  # embedded mode: pages poll instead
            return
        self.user, self.view, self.tenant_id = user, view, membership.tenant_id
        slot = uuid.uuid4().hex
        if not await sync_to_async(quotas.live_connection_acquire)(self.tenant_id, slot):
            await self.close(code=CLOSE_TOO_MANY_CONNECTIONS)
            return
        self.slot = slot
        self.zone = zone_or_none(view.zone) or viewer_zone_from_cookies(self.scope.get("cookies", {}))
        from redis import asyncio as aioredis

        self.redis = aioredis.Redis.from_url(settings.REDIS_URL)
        self.pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
        await self.pubsub.subscribe(channel_for(self.tenant_id))
        await self.accept()
        self.listener = asyncio.create_task(self.listen())
        self.renewer = asyncio.create_task(self.renew_slot())

    async def disconnect(self, code):
        for task in (self.listener, self.renewer):
            if task is not None:
                task.cancel()
        if self.slot is not None:
            await sync_to_async(quotas.live_connection_release)(self.tenant_id, self.slot)
            self.slot = None
        if self.pubsub is not None:
            await self.pubsub.aclose()
        if self.redis is not None:
            await self.redis.aclose()

    async def renew_slot(self):
        """Keep the slot from expiring while the socket is open; a slot lost meanwhile (it
        expired, say Redis was flushed, and the cap is full now) closes the socket."""
        while True:
            await asyncio.sleep(quotas.LIVE_CONNECTION_TTL_SECONDS / 3)
            if not await sync_to_async(quotas.live_connection_acquire)(self.tenant_id, self.slot):
                await self.close(code=CLOSE_TOO_MANY_CONNECTIONS)
                return

    async def receive_json(self, content, **kwargs):
        pass  # the page only listens

    async def listen(self):
        try:
            while True:
                run_ids = await self.next_batch()
                if len(run_ids) > MAX_ROWS_PER_PUSH:
                    await self.send_json({"refresh": True})
                    self.pushed = None  # the page redraws its table: what it shows is unknown here
                    await asyncio.sleep(REFRESH_SECONDS)
                    await self.drain()
                    continue
                rows = await database_sync_to_async(self.render)(run_ids)
                if rows is None:
                    await self.close(code=CLOSE_FORBIDDEN)
                    return
                rows = self.changed(rows)
                if rows:
                    await self.send_json({"rows": rows})
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.warning("live updates stopped for tenant %s", self.tenant_id, exc_info=True)
            await self.close(code=1011)  # the page reconnects with back-off

    def changed(self, rows: list[dict]) -> list[dict]:
        """The rows whose html differs from what this socket pushed for them last. A run's events
        can arrive in separate batches after the page already shows their outcome (the first
        event's re-read saw it; the worker's publisher sends at most every 0.25 s): pushed again,
        the same row was redrawn under the user, unticking its checkbox and closing its attempts
        (tests/dashboard/test_browser.py replay)."""
        pushed = self.pushed if self.pushed is not None else {}
        fresh = [row for row in rows if pushed.get(row["id"]) != row["html"]]
        if len(pushed) + len(fresh) > MAX_REMEMBERED_ROWS:
            pushed = {}
        pushed.update((row["id"], row["html"]) for row in fresh)
        self.pushed = pushed
        return fresh

    async def next_batch(self) -> set[str]:
        """Wait for an event, then gather whatever else arrives within BATCH_SECONDS."""
        loop = asyncio.get_running_loop()
        run_ids: set[str] = set()
        deadline = None
        while deadline is None or loop.time() < deadline:
            timeout = 30.0 if deadline is None else max(deadline - loop.time(), 0.0)
            message = await self.pubsub.get_message(ignore_subscribe_messages=True, timeout=timeout)
            if message is None or message.get("type") != "message":
                continue
            run_ids.update(run_id for run_id, _ in decode(message["data"]))
            if run_ids and deadline is None:
                deadline = loop.time() + BATCH_SECONDS
        return run_ids

    async def drain(self):
        """Drop the events that arrived meanwhile: the refreshed table shows their outcome."""
        while await self.pubsub.get_message(ignore_subscribe_messages=True, timeout=0):
            pass

    def render(self, run_ids) -> list[dict] | None:
        """Rows for the changed runs, or None when the user is no longer a member of the tenant."""
        membership = membership_of(self.user, self.tenant_id)
        if membership is None:
            return None
        return render_rows(membership=membership, view=self.view, run_ids=run_ids, zone=self.zone)
