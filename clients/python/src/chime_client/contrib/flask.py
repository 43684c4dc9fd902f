"""``@webhook_handler``: a Flask route that runs once per ``webhook-id``."""

import functools

from flask import make_response, request

from chime_client.receiver import Rejection, WebhookReceiver


def webhook_handler(secrets=None, *, store=None, receiver: WebhookReceiver | None = None, **options):
    """Decorate ``handler(webhook, **view_args)`` under ``@app.post(...)``: verified from the raw
    body (``request.get_data()``), 401 for a bad signature or a stale timestamp, 400 without the
    headers, 200 without calling the handler for a duplicate already handled. A 2xx answer marks
    the id done; an exception or another status lets Chime's retry call the handler again."""
    gatekeeper = receiver or WebhookReceiver(secrets, store=store, **options)

    def decorate(handler):
        @functools.wraps(handler)
        def wrapper(*args, **kwargs):
            outcome = gatekeeper.gate(request.get_data(cache=True), request.headers)
            if isinstance(outcome, Rejection):
                return outcome.message, outcome.status, {"Content-Type": "text/plain", **outcome.headers}
            ok = False
            try:
                response = make_response(handler(outcome, *args, **kwargs))
                ok = 200 <= response.status_code < 300
                return response
            finally:
                gatekeeper.finish(outcome, ok=ok)

        return wrapper

    return decorate
