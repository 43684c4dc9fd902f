"""The peers of the `peers` bench (bench/peers.py): what a Django shop runs without Chime.

- **hand-rolled** (bench/handrolled.py): a plain Django table of webhooks, a loop that selects the
  due rows every second and sends one Celery task per row; the task does `requests.post`.
- **beat**: django-celery-beat's DatabaseScheduler, one one-off `ClockedSchedule` entry per
  webhook, sending the same kind of task.

Its own settings (settings.py), table (models.py, created by `python -m bench.shop.admin setup`)
and Celery app (tasks.py); nothing here imports Chime's apps.
"""

DONE_KEY = "shop:beat:done"  # Redis counter of finished shop.post tasks (beat has no outcome rows)
