"""Chime's base settings plus CELERY_DB_REUSE_MAX, for the peers bench's --chime-worker-settings.

Without it Celery's Django fixup closes the worker's connections, and in prefork its psycopg pool,
before and after every task (celery/fixups/django.py `_close_database`): a new pool and a new
PostgreSQL connection every task. This module measures what keeping them would change, without
touching config/: `python -m bench.peers --designs chime --chime-worker-settings bench.reuse_settings`.
"""

from config.settings.base import *  # noqa: F403

CELERY_DB_REUSE_MAX = 1_000_000
