"""Celery tasks: thin. Fetch by id, call the service."""

from celery import shared_task
from celery.exceptions import Reject

from . import services


@shared_task(name="delivery.deliver_runs", bind=True, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def deliver_runs_task(self, run_ids: list[str]) -> dict:
    """Admit the runs into this process's delivery window and return (the window sends and
    records them); run eagerly (no worker), wait for their outcomes instead."""
    try:
        if self.request.is_eager:
            return services.deliver_runs(run_ids).as_dict()
        return services.admit_runs(run_ids).as_dict()
    except services.HandBack as exc:
        # Back to the broker for another worker (or this one, after a database outage).
        raise Reject(str(exc), requeue=True) from exc
