"""Celery tasks: thin. Fetch by id, call the service."""

from celery import shared_task

from . import services


@shared_task(name="delivery.deliver_runs", acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def deliver_runs_task(run_ids: list[str]) -> dict:
    return services.deliver_runs(run_ids).as_dict()
