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
