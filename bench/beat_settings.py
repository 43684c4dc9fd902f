"""Settings for bench/beat.py only: Chime's base settings plus django-celery-beat.

django-celery-beat is a bench-only dependency (requirements/bench.txt) used as the baseline that
Chime's scheduler is compared with; Chime itself never loads it.
"""

from config.settings.base import *  # noqa: F403
from config.settings.base import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "django_celery_beat"]
