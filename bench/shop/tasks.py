"""The shop's Celery app and its two tasks, each one webhook per task with `requests.post`.

`deliver` is the hand-rolled design's task (reads its row, posts, records the outcome on the row);
`post` is what the beat entries send (the URL and ids in the message, nothing recorded in the
database: beat's own bookkeeping is its PeriodicTask row; a Redis counter tells the bench when it
is done). Both send the `webhook-id` and `Chime-Scheduled-For` headers the bench receiver records,
with a 10 s timeout like the Chime jobs of the same bench, and no retry (one attempt each, as there).
"""

import contextlib
import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.shop.settings")
django.setup()

import redis  # noqa: E402
import requests  # noqa: E402
from celery import Celery  # noqa: E402
from django.utils import timezone  # noqa: E402

from bench.shop import DONE_KEY  # noqa: E402
from bench.shop.models import Webhook  # noqa: E402

TIMEOUT_SECONDS = 10

app = Celery("shop")
app.config_from_object("django.conf:settings", namespace="CELERY")
_redis = None


def _post(url: str, webhook_id: str, scheduled_for: str, payload: dict):
    headers = {"webhook-id": webhook_id, "Chime-Scheduled-For": scheduled_for}
    return requests.post(url, json=payload, headers=headers, timeout=TIMEOUT_SECONDS)


@app.task(name="shop.deliver")
def deliver(webhook_id: int) -> None:
    hook = Webhook.objects.get(pk=webhook_id)
    try:
        response = _post(url=hook.url, webhook_id=f"shop-{hook.pk}", scheduled_for=hook.due_at.isoformat(),
                         payload=hook.payload)  # fmt: skip
        hook.status, hook.status_code = ("sent" if response.ok else "failed"), response.status_code
    except requests.RequestException:
        hook.status = "failed"
    hook.attempts += 1
    hook.sent_at = timezone.now()
    hook.save(update_fields=["status", "status_code", "attempts", "sent_at"])


@app.task(name="shop.post")
def post(url: str, webhook_id: str, scheduled_for: str) -> None:
    global _redis
    with contextlib.suppress(requests.RequestException):
        _post(url, webhook_id, scheduled_for, {"bench": True})
    if _redis is None:
        _redis = redis.Redis.from_url(os.environ["REDIS_URL"])
    _redis.incr(DONE_KEY)
