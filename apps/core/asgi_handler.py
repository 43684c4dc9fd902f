"""Django's ASGI handler with the middleware chain and the view in one thread hop per request.

Chime's views, its middleware and most of Django's are synchronous. Under Django's stock ASGI
handler the chain is built in async mode: every `MiddlewareMixin` that can run both ways calls its
`process_request` and `process_response` through `sync_to_async` (one thread hop each), a
sync-only middleware (WhiteNoise, HealthMiddleware) switches back with `async_to_sync`, and the
view is one more hop. A `POST /api/v1/jobs` crossed between the event loop and its thread 17
times (16 to the thread, one back), for nothing: no part of the chain awaits anything. Here: 3
(the request_started signal's receivers, the chain with its view, closing the response).

Here the chain is built as under WSGI (`load_middleware(is_async=False)`: no adapters at all) and
run whole in one `sync_to_async` call, in the request's own thread-sensitive context as Django
runs a sync view. Everything else (reading the body, the `request_started` / `request_finished`
signals, sending the response, a client's disconnect cancelling the request) is Django's
`ASGIHandler`, unchanged. WebSockets do not come here (config/asgi.py routes them to Channels).

Measured with `python -m bench.create --quick --batch-jobs 0 --code <tree> --rounds 2` (the
Procfile's web, production settings, 16 clients): 9.3 / 8.4 -> 7.4 / 6.5 CPU-ms of the web
process per created job, 103 / 116 -> 129 / 146 jobs/s (docs/benchmarks.md#create-jobs-through-the-api).
tests/core/test_asgi_handler.py counts the hops of a request through config.asgi.

An async view would still work (`_get_response` runs it with `async_to_sync`), at the price of
the hop back to the loop; Chime has none.
"""

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIHandler


class OneHopASGIHandler(ASGIHandler):
    def load_middleware(self, is_async=False):
        super().load_middleware(is_async=False)

    async def get_response_async(self, request):
        return await sync_to_async(self.get_response, thread_sensitive=True)(request)


def get_one_hop_asgi_application() -> OneHopASGIHandler:
    """As `django.core.asgi.get_asgi_application`, with the handler above."""
    import django

    django.setup(set_prefix=False)
    return OneHopASGIHandler()
