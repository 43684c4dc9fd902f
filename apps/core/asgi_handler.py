"""Django's ASGI handler with everything synchronous in a request done in one thread hop.

Chime's views, its middleware and most of Django's are synchronous. Under Django's stock ASGI
handler the chain is built in async mode: every `MiddlewareMixin` that can run both ways calls its
`process_request` and `process_response` through `sync_to_async` (one thread hop each), a
sync-only middleware (WhiteNoise, HealthMiddleware) switches back with `async_to_sync`, and the
view is one more hop; the `request_started` signal's receivers and closing the response (the
`request_finished` signal) are two more. A `POST /api/v1/jobs` crossed between the event loop
and its thread 17 times, for nothing: no part of it awaits anything.

Here the chain is built as under WSGI (`load_middleware(is_async=False)`: no adapters at all), and
one `sync_to_async` call does the request's synchronous work in order (`respond`): the
`request_started` signal, the chain with its view, and, for a response that is not streamed,
closing it, which sends `request_finished` (it gives the thread's database connection back to the
pool) just before the bytes go out rather than just after. A streamed response (a static file) is
closed after it is sent, as Django does, in a second hop. Reading the body, building the request,
sending the response and listening for the client's disconnect are Django's own. A request
received whole runs to its end even if its client leaves meanwhile; nothing is sent to it, and a
streamed response stops. (Django's handler cancels the wait on a disconnect, which can drop a view
not started yet.) WebSockets do not come here (config/asgi.py routes them to Channels).

Measured with `python -m bench.create --quick --batch-jobs 0 --code <tree> --rounds 2` (the
Procfile's web, production settings, 16 clients): the chain in one hop took 9.3 / 8.4 -> 7.4 / 6.5
CPU-ms of the web process per created job; the signals and the close in the same hop, and the
kept threads below: docs/benchmarks.md (issue #12, sixteenth session, `python -m bench.web`).
tests/core/test_asgi_handler.py counts the hops of a request through config.asgi and compares the
answers with Django's handler.

An async view would still work (`_get_response` runs it with `async_to_sync`), at the price of
the hop back to the loop; Chime has none.

The hop goes to a thread lent to the request for its whole life and kept for the next request
(`RequestThreads`), as a WSGI server's threads serve one request after another. Django's
`ThreadSensitiveContext()` starts a thread for every request and, at its end, one more to join
it.
"""

import asyncio
import contextlib
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.conf import settings
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.http import FileResponse, HttpResponse, JsonResponse
from django.urls import set_script_prefix


class RequestThread(ThreadPoolExecutor):
    """One thread, lent to one request at a time (`RequestThreads`). It counts the calls it has
    not finished, so that it goes back to the idle list only once it has none left: a request
    whose task was cancelled mid-view (the server shutting down) leaves its view running, and
    that thread is kept from other requests until the view ends."""

    def __init__(self, threads: "RequestThreads"):
        super().__init__(max_workers=1, thread_name_prefix="chime-request")
        self._owner = threads
        self._lock = threading.Lock()
        self._unfinished = 0
        self._lent = False

    def submit(self, fn, /, *args, **kwargs):
        with self._lock:
            self._unfinished += 1
        future = super().submit(fn, *args, **kwargs)
        future.add_done_callback(self._finished)
        return future

    def _finished(self, _future) -> None:
        with self._lock:
            self._unfinished -= 1
            idle = not self._lent and self._unfinished == 0
        if idle:
            self._owner.keep(self)

    def lend(self) -> "RequestThread":
        self._lent = True
        return self

    def give_back(self) -> None:
        with self._lock:
            self._lent = False
            idle = self._unfinished == 0
        if idle:
            self._owner.keep(self)


class RequestThreads:
    """Threads kept from one request to the next, each serving one request at a time.

    Django needs a request's synchronous parts in one thread of its own: the database connection
    is per thread, and `request_finished`, which returns it to the pool, must run where the view
    ran. That is why the stock handler starts a thread per request. Here the thread is kept, as
    a WSGI server keeps its threads. It is not a cap: with every kept thread busy, a request gets
    a new one, as under the stock handler. Past `keep` idle threads, one that comes back is shut
    down, so a burst does not leave its threads behind.
    """

    def __init__(self, keep: int):
        self.keep_at_most = keep
        self._idle: list[RequestThread] = []
        self._lock = threading.Lock()

    def lend(self) -> RequestThread:
        with self._lock:
            thread = self._idle.pop() if self._idle else None
        return (thread or RequestThread(self)).lend()

    def keep(self, thread: RequestThread) -> None:
        with self._lock:
            if len(self._idle) < self.keep_at_most:
                self._idle.append(thread)
                return
        thread.shutdown(wait=False)

    def idle(self) -> int:
        return len(self._idle)


class OneHopASGIHandler(ASGIHandler):
    def __init__(self):
        super().__init__()
        # Twice the database pool (config/settings/base.py): more requests at once than that wait
        # for a connection anyway.
        self.threads = RequestThreads(keep=2 * database_pool_size())

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await super().__call__(scope, receive, send)  # Django's own refusal
        thread = self.threads.lend()
        try:
            async with ThreadSensitiveContext(executor=thread):
                await self.handle(scope, receive, send)
        finally:
            thread.give_back()

    def load_middleware(self, is_async=False):
        super().load_middleware(is_async=False)

    async def handle(self, scope, receive, send):
        """Django's `ASGIHandler.handle`, with the request's synchronous work in one hop (`respond`)."""
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        set_script_prefix(get_script_prefix(scope))
        request, error_response = self.create_request(scope, body_file)
        listening = asyncio.ensure_future(self.listen_for_disconnect(receive))
        response = None
        try:
            response = await sync_to_async(self.respond, thread_sensitive=True)(scope, request, error_response)
            if not listening.done():  # else the client has left: nothing to send it
                sending = asyncio.ensure_future(self.send_response(response, send))
                await asyncio.wait([sending, listening], return_when=asyncio.FIRST_COMPLETED)
                if sending.done():
                    sending.result()
                else:  # the client left mid-response (a streamed file): stop, as Django's handler does
                    sending.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await sending
        finally:
            listening.cancel()
            if response is not None and response.streaming:
                await sync_to_async(response.close, thread_sensitive=True)()
            body_file.close()
        if listening.done() and not listening.cancelled():
            with contextlib.suppress(RequestAborted):  # the client left; an invalid message raises
                listening.result()

    def respond(self, scope, request, error_response):
        """In the request's thread, in one go: `request_started`, the middleware chain with its view
        (or the response to a request that could not be built), and closing a response that is
        not streamed (`request_finished`)."""
        signals.request_started.send(sender=self.__class__, scope=scope)
        response = error_response if request is None else self.get_response(request)
        response._handler_class = self.__class__
        if isinstance(response, FileResponse):
            response.block_size = self.chunk_size
        if not response.streaming:
            response.close()
        return response

    async def read_body(self, receive):
        """Django's, but nothing past the largest body Chime accepts is kept.

        Django's own spools the whole body to a temporary file before any limit is checked (the
        limits are checked when the body is parsed): a client could fill the web's disk with one
        request. Past `body_cap()` the rest is received and dropped, so the client still gets a
        clean 413 instead of a reset connection mid-send."""
        # Closed here on every early exit, else by handle() with the request.
        body_file = tempfile.SpooledTemporaryFile(max_size=settings.FILE_UPLOAD_MAX_MEMORY_SIZE, mode="w+b")  # noqa: SIM115
        cap, size = body_cap(), 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                body_file.close()
                raise RequestAborted()
            chunk = message.get("body", b"")
            size += len(chunk)
            if cap is None or size <= cap:
                body_file.write(chunk)
            if not message.get("more_body", False):
                break
        if cap is not None and size > cap:
            body_file.close()
            return Oversized()
        body_file.seek(0)
        return body_file

    def create_request(self, scope, body_file):
        """A body too large is refused (413, in the API's error format under /api/); a body that
        came without Content-Length (`Transfer-Encoding: chunked`, which the server has already
        joined) gets its length, which DRF needs: without it DRF reads the body as empty, and a
        chunked POST /api/v1/jobs was answered "name: This field is required."."""
        if isinstance(body_file, Oversized):
            return None, too_large(scope)
        if not any(name == b"content-length" for name, _ in scope.get("headers", [])):
            size = body_file.seek(0, 2)
            body_file.seek(0)
            if size:
                scope = {**scope, "headers": [*scope.get("headers", []), (b"content-length", str(size).encode())]}
        return super().create_request(scope, body_file)


class Oversized:
    """What read_body returns for a body past the cap: nothing kept, nothing to close."""

    def close(self) -> None:
        pass


def body_cap() -> int | None:
    """The largest request body any endpoint accepts: a batch of jobs (CHIME_API_MAX_BATCH_BODY_BYTES)
    or any other request (DATA_UPLOAD_MAX_MEMORY_SIZE, which Django and the API parsers check)."""
    limits = [settings.DATA_UPLOAD_MAX_MEMORY_SIZE, settings.CHIME_API_MAX_BATCH_BODY_BYTES]
    return None if None in limits else max(limits)


def too_large(scope) -> HttpResponse:
    message = (
        f"Request bodies are limited to {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes "
        f"({settings.CHIME_API_MAX_BATCH_BODY_BYTES} for POST /api/v1/jobs/batch)."
    )
    if scope.get("path", "").startswith("/api/"):
        return JsonResponse({"error": {"code": "too_large", "message": message}}, status=413)
    return HttpResponse(message, status=413, content_type="text/plain; charset=utf-8")


def database_pool_size() -> int:
    """The process's database pool size (config/settings/base.py); 10 without a pool (SQLite)."""
    pool = settings.DATABASES["default"].get("OPTIONS", {}).get("pool")
    return int(pool.get("max_size", 10)) if isinstance(pool, dict) else 10


def get_one_hop_asgi_application() -> OneHopASGIHandler:
    """As `django.core.asgi.get_asgi_application`, with the handler above."""
    import django

    django.setup(set_prefix=False)
    return OneHopASGIHandler()
