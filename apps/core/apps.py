import logging

from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "apps.core"
    label = "core"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # Python warnings as log records (logger py.warnings): with LOG_FORMAT=json they are JSON
        # lines like the rest, not stray text on stderr. Django 5 no longer does this itself.
        logging.captureWarnings(True)
        from django.conf import settings

        from . import dbtypes, tracing

        dbtypes.install()

        # A Celery worker's main process delivers nothing: its prefork children trace, each
        # configured after the fork (config/celery.py), since the exporter runs a thread.
        if settings.PROCESS_TYPE not in ("worker", "ops"):
            tracing.configure(settings.PROCESS_TYPE)
