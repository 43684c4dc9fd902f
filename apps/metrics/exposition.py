"""Where Prometheus scrapes each process type (docs/operations.md#metrics).

- **web**: `GET /metrics` with `Authorization: Bearer $CHIME_METRICS_TOKEN` (constant-time
  compare; no token set = the endpoint is off and answers 404). It serves the web process's own
  metrics and the database gauges (apps/metrics/collectors.py). Answered before the host check
  (apps/core/health.py), since Prometheus addresses a pod by its IP.
- **worker** and **scheduler**: no HTTP of their own, so each serves its metrics on a separate
  port, `CHIME_METRICS_PORT` (off when unset), bound to `CHIME_METRICS_ADDR`: a port that is
  not routed to the public, which is how it is protected. The worker runs Celery prefork children:
  the client's multi-process mode aggregates them (each child writes its samples to files in
  PROMETHEUS_MULTIPROC_DIR, set up in config/celery.py before prometheus_client is imported; the
  worker's main process serves their sum).

Why one exporter per process type rather than one for all: the processes run in different
containers (a PaaS dyno each), which share no files; Prometheus adds them up by `job`.
"""

import hmac
import os

from django.conf import settings
from django.http import HttpResponse, JsonResponse
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest, start_http_server
from prometheus_client.multiprocess import MultiProcessCollector

from .collectors import DatabaseCollector


def _process_registry():
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        MultiProcessCollector(registry)
        return registry
    return REGISTRY


def web_metrics(request) -> HttpResponse:
    token = settings.CHIME_METRICS_TOKEN
    if not token:
        return JsonResponse({"detail": "Metrics are off: set CHIME_METRICS_TOKEN to serve them."}, status=404)
    given = request.headers.get("Authorization", "")
    if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
        response = JsonResponse({"detail": "A valid bearer token is required."}, status=401)
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    import apps.metrics.registry  # noqa: F401 (the web's own metrics exist before the first event)

    database = CollectorRegistry(auto_describe=False)
    database.register(DatabaseCollector())
    body = generate_latest(_process_registry()) + generate_latest(database)
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)


def start_exporter() -> int | None:
    """Serve this process's metrics on CHIME_METRICS_PORT (worker main process, scheduler)."""
    port = settings.CHIME_METRICS_PORT
    if not port:
        return None
    import apps.metrics.registry  # noqa: F401 (every series is there from the first scrape)

    start_http_server(port, addr=settings.CHIME_METRICS_ADDR, registry=_process_registry())
    return port
