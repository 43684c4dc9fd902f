"""``@webhook_view``: a Django view that runs once per ``webhook-id``."""

import functools

from django.http import HttpResponse
from django.views.decorators.csrf import csrf_exempt

from chime_client.receiver import Rejection, WebhookReceiver


def webhook_view(secrets=None, *, store=None, receiver: WebhookReceiver | None = None, **options):
    """Decorate ``view(request, webhook)``: the request is verified (raw ``request.body``), a bad
    signature is a 401, a stale timestamp a 401, missing headers a 400, a duplicate already handled
    a 200 without calling the view. The view's answer counts as handled when it is 2xx; an
    exception or another status releases the id, so Chime's retry calls the view again.

    ``secrets`` may be a callable (e.g. ``lambda: settings.CHIME_SIGNING_SECRETS``)."""
    gatekeeper = receiver or WebhookReceiver(secrets, store=store, **options)

    def decorate(view):
        @csrf_exempt
        @functools.wraps(view)
        def wrapper(request, *args, **kwargs):
            outcome = gatekeeper.gate(request.body, request.headers)
            if isinstance(outcome, Rejection):
                response = HttpResponse(outcome.message, status=outcome.status, content_type="text/plain")
                for name, value in outcome.headers.items():
                    response[name] = value
                return response
            ok = False
            try:
                response = view(request, outcome, *args, **kwargs)
                ok = 200 <= response.status_code < 300
                return response
            finally:
                gatekeeper.finish(outcome, ok=ok)

        return wrapper

    return decorate
