"""The design a Django shop writes by hand: a due scan every second, one Celery task per webhook.

A plain Django table (`shop_webhook`, bench/shop/models.py) holds one row per webhook with its
`due_at`. This loop wakes every second, selects the due `pending` rows (`SELECT ... FOR UPDATE
SKIP LOCKED`, 1,000 at a time, at once again while batches come back full), marks them `queued`
and sends one `shop.deliver` Celery task per row (bench/shop/tasks.py: Celery prefork on Redis,
`requests.post`, the outcome written back on the row). No leases, no retries, no fairness, no
backpressure: what the peers bench (bench/peers.py) compares Chime with.

    python -m bench.handrolled      # the loop, with DJANGO_SETTINGS_MODULE=bench.shop.settings

The bench side (load, counts) uses psycopg only, so bench/peers.py can import it next to Chime.
"""

from __future__ import annotations

import io
import json
import sys
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable as `python bench/x.py` too

BATCH = 1000
TABLE = "shop_webhook"
DONE = ("sent", "failed")


def scan_once(now) -> int:
    """Queue the due rows of one batch and send their tasks; returns how many."""
    from django.db import transaction

    from bench.shop.models import Webhook
    from bench.shop.tasks import deliver

    with transaction.atomic():
        due = Webhook.objects.select_for_update(skip_locked=True).filter(status="pending", due_at__lte=now)
        ids = list(due.order_by("due_at").values_list("pk", flat=True)[:BATCH])
        if ids:
            Webhook.objects.filter(pk__in=ids).update(status="queued")
    for pk in ids:
        deliver.delay(pk)
    return len(ids)


def loop() -> None:
    import os

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.shop.settings")
    import django

    django.setup()
    from django.utils import timezone

    print("scan started", flush=True)
    while True:
        started = time.monotonic()
        sent = 0
        while True:
            batch = scan_once(timezone.now())
            sent += batch
            if batch < BATCH:
                break
        if sent:
            print(f"scan: queued {sent}", flush=True)
        time.sleep(max(0.0, 1.0 - (time.monotonic() - started)))


# --- bench side (psycopg, no Django) --------------------------------------------------------


def load(conn, *, urls: list[str], fire_at: datetime) -> None:
    """Empty shop_webhook and COPY one pending row per URL, all due at fire_at."""
    due = fire_at.isoformat()
    payload = json.dumps({"bench": True})
    buf = io.StringIO()
    for url in urls:
        buf.write(f"{url}\t{payload}\t{due}\tpending\t0\n")
    conn.execute(f"TRUNCATE {TABLE} RESTART IDENTITY")
    with conn.cursor() as cur, cur.copy(f"COPY {TABLE} (url, payload, due_at, status, attempts) FROM STDIN") as copy:
        copy.write(buf.getvalue())
    conn.execute(f"ANALYZE {TABLE}")


def finished(conn) -> int:
    """Rows whose outcome the task has recorded."""
    return conn.execute(f"SELECT count(*) FROM {TABLE} WHERE status IN ('sent', 'failed')").fetchone()[0]  # noqa: S608


def clear(conn) -> None:
    conn.execute(f"TRUNCATE {TABLE} RESTART IDENTITY")


if __name__ == "__main__":
    loop()
