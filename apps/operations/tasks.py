"""The operations' Celery task: thin. Routed to the `ops` queue (CELERY_TASK_ROUTES), never to
the delivery queues; the only Chime task whose state and result are stored (django-celery-results)."""

from celery import shared_task
from celery.exceptions import Ignore, Reject

from . import services


@shared_task(
    name="operations.run",
    bind=True,
    acks_late=True,  # a worker killed mid-operation leaves its message to be delivered again
    reject_on_worker_lost=True,
    ignore_result=False,  # CELERY_TASK_IGNORE_RESULT is True for every other task
    track_started=True,  # STARTED in TaskResult while it runs
)
def run_operation_task(self, operation_id: str) -> dict:
    try:
        return services.operation_run(operation_id, owner=services.worker_identity())
    except (services.OperationBusy, services.LeaseLost):
        raise Ignore() from None  # another worker has it: store nothing over its state
    except services.HandedBack as exc:
        raise Reject(str(exc), requeue=True) from exc  # SIGTERM: the next worker resumes it
