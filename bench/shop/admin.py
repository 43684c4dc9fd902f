"""Set-up steps for the shop peers, run in a process with the shop's settings (bench/peers.py).

    python -m bench.shop.admin setup                 # django-celery-beat's tables + shop_webhook
    python -m bench.shop.admin beat-load < spec.json # {"fire_at": ISO, "urls": [...]}: one entry each
    python -m bench.shop.admin beat-clear

The shop table has no migration: it is created with the schema editor when missing, so the bench
database needs nothing from apps/.
"""

import json
import os
import sys
from datetime import datetime

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.shop.settings")
django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from bench.shop.models import Webhook  # noqa: E402


def setup() -> None:
    call_command("migrate", "django_celery_beat", verbosity=0, skip_checks=True)
    if Webhook._meta.db_table not in connection.introspection.table_names():
        with connection.schema_editor() as editor:
            editor.create_model(Webhook)


def beat_load(spec: dict) -> None:
    """One one-off clocked PeriodicTask per URL, all at `fire_at`, sending shop.post."""
    from django_celery_beat.models import ClockedSchedule, PeriodicTask, PeriodicTasks

    beat_clear()
    fire_at = datetime.fromisoformat(spec["fire_at"])
    clocked = ClockedSchedule.objects.create(clocked_time=fire_at)
    PeriodicTask.objects.bulk_create(
        [
            PeriodicTask(
                name=f"peer-{k}",
                task="shop.post",
                clocked=clocked,
                one_off=True,
                args=json.dumps([url, f"beat-{k}", fire_at.isoformat()]),
                enabled=True,
            )
            for k, url in enumerate(spec["urls"])
        ],
        batch_size=2000,
    )
    PeriodicTasks.update_changed()


def beat_clear() -> None:
    """Delete every entry in one statement: the ORM's delete() sends django-celery-beat's signal per
    row (one UPDATE of the change marker each), 20,000 round trips for a bench-sized schedule."""
    from django_celery_beat.models import ClockedSchedule, PeriodicTask, PeriodicTasks

    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {PeriodicTask._meta.db_table}")  # noqa: S608 (model table names)
        cursor.execute(f"DELETE FROM {ClockedSchedule._meta.db_table}")  # noqa: S608
    PeriodicTasks.update_changed()


def main() -> None:
    command = sys.argv[1]
    if command == "setup":
        setup()
    elif command == "beat-load":
        beat_load(json.loads(sys.stdin.read()))
    elif command == "beat-clear":
        beat_clear()
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main()
