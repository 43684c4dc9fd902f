"""Graceful worker shutdown: in-flight deliveries finish or are handed back at once.

A PaaS stops a worker with SIGTERM to every process of the dyno and SIGKILL ~30 s later. Celery's
prefork children reset SIGTERM to its default, so a child died at once with its runs `running`:
they waited a whole lease (30 s) to be recovered, with a `worker_lost` attempt. Instead each child
turns SIGTERM into "draining" (config/celery.py installs the handler; the parent, on its own warm
shutdown, forwards SIGTERM to its children so a SIGTERM sent to the parent alone drains too):

- a task that has not claimed its runs yet hands its message back to the broker;
- requests in flight get CHIME_WORKER_SHUTDOWN_GRACE_SECONDS to finish; those still out then
  are cancelled and their runs made deliverable again at once (an `interrupted` attempt: the
  request was sent, so the endpoint may have seen it; the same webhook-id follows).
"""

import signal
import threading
import time

from django.conf import settings

_draining = threading.Event()
_since: float | None = None


def start_draining(*_args) -> None:
    global _since
    if not _draining.is_set():
        _since = time.monotonic()
        _draining.set()


def is_draining() -> bool:
    return _draining.is_set()


def grace_over() -> bool:
    """True once the shutdown grace has passed: time to hand back what is still in flight."""
    return _since is not None and time.monotonic() - _since >= settings.CHIME_WORKER_SHUTDOWN_GRACE_SECONDS


def install_sigterm_handler() -> None:
    if signal.getsignal(signal.SIGTERM) is not start_draining:
        signal.signal(signal.SIGTERM, start_draining)


def reset() -> None:
    """For tests."""
    global _since
    _draining.clear()
    _since = None
