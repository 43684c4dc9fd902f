"""Starlette and FastAPI: an endpoint decorator that runs the handler once per ``webhook-id``.

Works for a Starlette ``Route`` and a FastAPI route alike: the decorated endpoint takes the
``Request`` only (FastAPI sees ``request: Request``), reads the raw body, and calls
``handler(request, webhook)``. The dedupe store is called in a thread (stores are synchronous).
"""

import functools
import inspect

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from chime_client.receiver import Rejection, WebhookReceiver


def webhook_endpoint(secrets=None, *, store=None, receiver: WebhookReceiver | None = None, **options):
    """Decorate ``async def handler(request, webhook)`` (or a plain ``def``) returning a response
    (FastAPI: a response, or anything JSON-able, sent as JSON). 401: bad signature or stale
    timestamp; 400: not a webhook; 200 without calling the handler: a duplicate already handled.
    A 2xx marks the id done; an exception or another status lets Chime's retry call it again."""
    gatekeeper = receiver or WebhookReceiver(secrets, store=store, **options)

    def decorate(handler):
        async def endpoint(request: Request) -> Response:
            body = await request.body()
            outcome = await run_in_threadpool(gatekeeper.gate, body, request.headers)
            if isinstance(outcome, Rejection):
                return PlainTextResponse(outcome.message, status_code=outcome.status, headers=outcome.headers)
            ok = False
            try:
                if inspect.iscoroutinefunction(handler):
                    result = await handler(request, outcome)
                else:
                    result = await run_in_threadpool(handler, request, outcome)
                if not isinstance(result, Response):
                    from starlette.responses import JSONResponse

                    result = JSONResponse(result)
                ok = 200 <= result.status_code < 300
                return result
            finally:
                await run_in_threadpool(gatekeeper.finish, outcome, ok=ok)

        functools.update_wrapper(endpoint, handler, assigned=("__module__", "__name__", "__qualname__", "__doc__"))
        endpoint.__signature__ = inspect.Signature(
            [inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Request)],
            return_annotation=Response,
        )
        return endpoint

    return decorate
