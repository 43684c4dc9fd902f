"""Minimal Django settings of the shop peers (bench/shop): the bench database, two apps.

Persistent connections as a shop that cares would set them: CONN_MAX_AGE, and CELERY_DB_REUSE_MAX,
without which Celery's Django fixup closes the worker's connection before and after every task (a
new PostgreSQL backend per webhook; its CPU would also escape bench/pgcost.py, which sees only live
backends). Everything else is Django's and Celery's default, which is what the comparison is about.
"""

import os

from bench.common import BENCH_DB

SECRET_KEY = "bench-shop"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = ["django_celery_beat", "bench.shop"]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": BENCH_DB,
        "USER": "postgres",
        "HOST": "127.0.0.1",
        "PORT": "5432",
        "CONN_MAX_AGE": 60,
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

CELERY_BROKER_URL = os.environ["REDIS_URL"]
CELERY_TASK_DEFAULT_QUEUE = "shop"
CELERY_TASK_IGNORE_RESULT = True
CELERY_DB_REUSE_MAX = 10_000
CELERY_TIMEZONE = "UTC"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
