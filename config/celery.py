"""The Celery application. Settings come from Django settings with the CELERY_ prefix."""

import os

from celery import Celery, bootsteps, signals

from config.kombu_fixes import guard_orphaned_channels

guard_orphaned_channels()  # a worker that loses Redis reconnects instead of dying (see the module)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.production")


def _metrics_directory_for_prefork_children() -> None:
    """prometheus_client's multi-process mode: each prefork child writes its samples to files in
    PROMETHEUS_MULTIPROC_DIR and the main process serves their sum (apps/metrics/exposition.py).
    The variable must be set before prometheus_client is first imported, and the folder must
    start empty (old files would add a dead worker's counts): a fresh one per worker start."""
    import atexit
    import shutil
    import tempfile

    from config.process import process_type

    if process_type() != "worker":  # the ops worker serves no metrics (start_exporter below)
        return
    given = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if given:
        os.makedirs(given, exist_ok=True)
        for name in os.listdir(given):
            if name.endswith(".db"):
                os.unlink(os.path.join(given, name))
        return
    folder = tempfile.mkdtemp(prefix="chime-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = folder
    main_pid = os.getpid()
    atexit.register(lambda: os.getpid() == main_pid and shutil.rmtree(folder, ignore_errors=True))


_metrics_directory_for_prefork_children()

app = Celery("chime")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@signals.celeryd_init.connect
def _log_like_every_chime_process(instance=None, **kwargs):
    """Celery warns (SecurityWarning) and prints its banner before Django configures logging: take
    Django's logging now, warnings included, so with LOG_FORMAT=json every line is JSON from the
    first one, and leave the banner out in that mode (it is text for a terminal, and "ready."
    says the same). Only Celery's shutdown notice (`worker: Warm shutdown`) stays a plain line:
    Celery writes it to stdout itself."""
    import logging

    from django.conf import settings
    from django.utils.log import configure_logging

    configure_logging(settings.LOGGING_CONFIG, settings.LOGGING)
    logging.captureWarnings(True)  # as apps/core/apps.py does, before Django is set up
    if settings.LOG_FORMAT == "json" and instance is not None:
        instance.quiet = True


@signals.worker_init.connect
def _serve_metrics(**kwargs):
    """The worker's main process serves its children's metrics on CHIME_METRICS_PORT. Not the ops
    worker's (apps/operations): it delivers nothing, and beside a worker on one host (`./chime
    run`) it would take the same port."""
    from apps.metrics.exposition import start_exporter
    from config.process import process_type

    if process_type() == "ops":
        return

    start_exporter()


def _keep_the_pool_between_tasks() -> None:
    """Celery's Django fixup closes the database connections before and after every task, and
    in a prefork child with a psycopg pool it also closes the *pool* (`close_pool()`). A delivery
    task returns once its runs are admitted, while the process's window keeps working on them in
    its recorder and lease-renewer threads (apps/delivery/window.py), on connections of that very
    pool: every task start and end closed it under them ("the pool ... is closed"), recording
    stalled in its retry loop, renewals failed, and the pool ran out of connections. Measured: a
    worker stalled with 13,189 of 20,000 runs still queued, and the 20,000-run spike delivered at
    ~400 runs/s. Between tasks, close only the task thread's connections (they go back to the
    pool); the inherited pool of a new child is still dropped at worker_process_init (below, and
    the fixup's own `_close_database`, which is left as it is)."""
    from celery.fixups import django as django_fixup

    def close_database(self, **kwargs):
        for conn in self._db.connections.all(initialized_only=True):
            try:
                conn.close()
            except self.interface_errors:
                pass
            except self.DatabaseError as exc:
                if "closed" not in str(exc) and "not connected" not in str(exc):
                    raise

    django_fixup.DjangoWorkerFixup.close_database = close_database


_keep_the_pool_between_tasks()


@signals.worker_init.connect
def _settle_the_heap_before_forking(**kwargs):
    """Everything the main process loaded out of the collector's reach before the children fork
    (apps/core/heap.py): they inherit it frozen."""
    from apps.core.heap import settle

    settle()


@signals.worker_init.connect
def _dump_stacks_on_sigusr2(**kwargs):
    """`kill -USR2` on a worker's process group writes every thread's Python stack of each process
    to its stderr (the log), and the processes go on: what an operator, or the chaos suite, reads
    when a shutdown overruns (docs/operations.md). Registered in the main process before the pool
    forks, so each child inherits it (SIGUSR2 would otherwise end a child)."""
    import faulthandler
    import signal

    faulthandler.register(signal.SIGUSR2, all_threads=True)


@signals.worker_process_init.connect
def _settle_the_childs_heap(**kwargs):
    from apps.core.heap import settle

    settle(collect=False)


@signals.worker_process_init.connect
def _forget_inherited_db_pool(**kwargs):
    """A prefork child must not use connections its parent opened: they are the same sockets.
    Celery's Django fixup closes plain connections; a psycopg pool it does not know about, so drop
    the inherited one (without closing it, which would talk on the parent's sockets) and let the
    child open its own on first use."""
    from django.db import connections

    for conn in connections.all(initialized_only=True):
        pools = getattr(type(conn), "_connection_pools", None)
        if pools:
            pools.pop(conn.alias, None)


@signals.worker_process_init.connect
def _name_the_worker_in_logs(**kwargs):
    """Every line a prefork child logs names it (`worker`: host:pid, as its lease owner does)."""
    import os
    import socket

    from apps.core.logs import bind

    bind(worker=f"{socket.gethostname()}:{os.getpid()}")


@signals.worker_process_init.connect
def _trace_from_the_child(**kwargs):
    """Traces (OTEL_EXPORTER_OTLP_ENDPOINT set): the exporter's thread must start in the child."""
    from apps.core import tracing
    from config.process import process_type

    tracing.configure(process_type())


@signals.worker_process_init.connect
def _ignore_sigterm_until_the_first_task(**kwargs):
    """Celery's prefork children exit at once on SIGTERM, and their parent logs each one as an
    ERROR. billiard installs that handler right after worker_process_init, unless the signal is
    ignored: so ignore it here (an idle child has nothing to drain; the parent's warm shutdown
    ends it cleanly) and drain from the first task on (below)."""
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_IGN)


@signals.task_prerun.connect
def _drain_on_sigterm(**kwargs):
    """A child killed mid-request left its runs to a lease expiry; drain instead: finish or hand
    back what is in flight (apps/delivery/draining.py). Idempotent, cheap per task."""
    from apps.delivery.draining import install_sigterm_handler

    install_sigterm_handler()


@signals.worker_shutting_down.connect
def _tell_children_to_drain(**kwargs):
    """A SIGTERM sent to the worker's main process alone (not to its process group, as a PaaS
    does) starts a warm shutdown that waits for the children's tasks: make them drain too."""
    import contextlib
    import os
    import signal

    from billiard.process import active_children

    for child in active_children():
        with contextlib.suppress(ProcessLookupError, TypeError):
            os.kill(child.pid, signal.SIGTERM)


@signals.worker_process_shutdown.connect
def _drain_the_delivery_window(**kwargs):
    """A child's tasks return once their runs are admitted, so the child may be told to exit
    with requests still in flight: they get the shutdown grace, their outcomes are recorded, and
    parked runs go back to the broker before the process ends (apps/delivery/window.py)."""
    from apps.delivery.window import drain_window

    drain_window()


class WorkerHeartbeat(bootsteps.StartStopStep):
    """Touches the worker's heartbeat file (apps/core/health.py) every CHIME_HEARTBEAT_SECONDS
    while the consumer's broker connection is up. A consumer step: Celery stops and starts it
    again with the connection, so a worker that lost Redis stops beating and `manage.py probe
    worker` turns unready once the beat is older than its limit."""

    requires = {"celery.worker.consumer.connection:Connection"}

    def __init__(self, parent, **kwargs):
        self.tref = None
        super().__init__(parent, **kwargs)

    def start(self, consumer):
        from django.conf import settings

        from apps.core.health import beat
        from config.process import process_type

        name = process_type() if process_type() == "ops" else "worker"  # `manage.py probe ops`

        def beat_if_connected():
            connection = consumer.connection
            if connection is not None and connection.connected:
                beat(name)

        beat_if_connected()
        self.tref = consumer.timer.call_repeatedly(settings.CHIME_HEARTBEAT_SECONDS, beat_if_connected)

    def stop(self, consumer):
        if self.tref is not None:
            self.tref.cancel()
            self.tref = None

    def shutdown(self, consumer):
        from apps.core.health import forget_heartbeat
        from config.process import process_type

        self.stop(consumer)
        forget_heartbeat(process_type() if process_type() == "ops" else "worker")


class OperationSweep(bootsteps.StartStopStep):
    """In the ops worker only: every CHIME_OPERATION_SWEEP_SECONDS, send again the bulk operations
    whose worker died mid-way (their lease lapsed; apps/operations/services.py requeue_lapsed).
    Redis would redeliver their unacknowledged message only after the whole visibility_timeout
    (an hour); the operation resumes from its recorded progress instead within seconds."""

    requires = {"celery.worker.consumer.connection:Connection"}

    def __init__(self, parent, **kwargs):
        self.tref = None
        super().__init__(parent, **kwargs)

    def start(self, consumer):
        from django.conf import settings

        from config.process import process_type

        if process_type() != "ops":
            return

        def sweep():
            import logging

            from django.db import close_old_connections

            from apps.operations.services import requeue_lapsed

            try:
                requeue_lapsed()
            except Exception:  # the database may be away: the next sweep tries again
                logging.getLogger(__name__).exception("operation sweep failed")
            finally:
                close_old_connections()

        self.tref = consumer.timer.call_repeatedly(settings.CHIME_OPERATION_SWEEP_SECONDS, sweep)

    def stop(self, consumer):
        if self.tref is not None:
            self.tref.cancel()
            self.tref = None


app.steps["consumer"].add(WorkerHeartbeat)
app.steps["consumer"].add(OperationSweep)
