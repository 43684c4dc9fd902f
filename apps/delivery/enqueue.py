"""Handing runs to Celery: one message carries a chunk of run ids, on the queue of its priority."""

from django.conf import settings


def queue_for(priority: str) -> str:
    return f"runs.{priority}"


def publish_runs(run_ids: list[str], *, priority: str) -> None:
    from .tasks import deliver_runs_task

    chunk = settings.CHIME_ENQUEUE_CHUNK
    for start in range(0, len(run_ids), chunk):
        deliver_runs_task.apply_async(args=[run_ids[start : start + chunk]], queue=queue_for(priority))
