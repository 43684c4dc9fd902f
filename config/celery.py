"""The Celery application. Settings come from Django settings with the CELERY_ prefix."""

import os

from celery import Celery, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.base")

app = Celery("chime")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@signals.worker_process_init.connect
def _forget_inherited_db_pool(**kwargs):
    """A prefork child must not use connections its parent opened: they are the same sockets.
    Celery's Django fixup closes plain connections; a psycopg pool it does not know about, so drop
    the inherited one (without closing it, which would talk on the parent's sockets) and let the
    child open its own on first use."""
    from django.db import connections

    for conn in connections.all(initialized_only=True):
        pools = getattr(type(conn), "_connection_pools", None)
        if pools:
            pools.pop(conn.alias, None)
