"""Liveness and readiness of every process type (docs/operations.md#health-checks).

- `/healthz`: the web process is alive. No I/O, so a slow database never gets a live process
  restarted by its orchestrator.
- `/readyz`: the web process can serve: PostgreSQL and Redis answer within
  CHIME_READINESS_TIMEOUT_SECONDS each. 503 otherwise, so a load balancer stops sending traffic
  while a dependency is away and sends it again once it is back.
- The scheduler and the worker serve no HTTP; each touches a heartbeat file in
  CHIME_HEARTBEAT_DIR while it works (the scheduler on every loop, the worker every few seconds
  while its broker connection is up), and `manage.py probe scheduler|worker` is their exec probe:
  ready when the dependencies answer and the heartbeat is younger than --max-age-seconds.

Both paths are answered by `HealthMiddleware`, first in the stack: before the host check (a probe
addresses the pod's IP, which is not in ALLOWED_HOSTS), the https redirect, sessions and CSRF.
What failed is logged; the response says only which check failed, not the server's address or
error text, since /readyz is public.
"""

import logging
import os
import time
from pathlib import Path

from django.conf import settings
from django.http import JsonResponse

logger = logging.getLogger(__name__)

OK = "ok"
UNAVAILABLE = "unavailable"
NOT_USED = "not used"


def check_database(timeout_seconds: float) -> str:
    """A fresh connection and `SELECT 1`, outside the process's pool: the pool's own wait
    (CHIME_DB_POOL_TIMEOUT_SECONDS, 30 s) is far longer than a probe may take, and a probe must
    tell whether the server answers now, not whether a pooled connection is still open."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return _check_sqlite()
    import psycopg

    params = connection.get_connection_params()
    params.pop("pool", None)
    params.pop("cursor_factory", None)
    params.pop("context", None)
    params["connect_timeout"] = max(1, round(timeout_seconds))
    params["options"] = f"{params.get('options', '')} -c statement_timeout={int(timeout_seconds * 1000)}".strip()
    try:
        with psycopg.connect(**params, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:  # any failure is "not ready"; the reason goes to the log only
        logger.warning("readiness: database unavailable: %s", exc)
        return UNAVAILABLE
    return OK


def _check_sqlite() -> str:
    from django.db import connection

    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:
        logger.warning("readiness: database unavailable: %s", exc)
        return UNAVAILABLE
    return OK


def check_redis(timeout_seconds: float) -> str:
    """PING on a new connection with short timeouts (the shared client's are longer: it also
    serves the channel layer's blocking reads). Embedded mode has no Redis."""
    if not settings.REDIS_URL:
        return NOT_USED
    import redis

    client = redis.Redis.from_url(
        settings.REDIS_URL, socket_timeout=timeout_seconds, socket_connect_timeout=timeout_seconds
    )
    try:
        client.ping()
    except Exception as exc:
        logger.warning("readiness: redis unavailable: %s", exc)
        return UNAVAILABLE
    finally:
        client.close()
    return OK


# --- heartbeats of the processes that serve no HTTP -----------------------------------------


def heartbeat_path(process_type: str) -> Path:
    return Path(settings.CHIME_HEARTBEAT_DIR) / f"{process_type}.heartbeat"


def beat(process_type: str) -> None:
    """Touch the process type's heartbeat file. Cheap (one utime), so the scheduler can call it on
    every loop; a failure to write is logged, never raised (a full disk must not stop scheduling)."""
    path = heartbeat_path(process_type)
    try:
        try:
            os.utime(path)
        except FileNotFoundError:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
    except OSError as exc:
        logger.warning("could not write heartbeat %s: %s", path, exc)


def heartbeat_age(process_type: str) -> float | None:
    """Seconds since the last beat, None if the process never beat here."""
    try:
        return max(0.0, time.time() - heartbeat_path(process_type).stat().st_mtime)
    except FileNotFoundError:
        return None


def forget_heartbeat(process_type: str) -> None:
    """On a clean stop: a stopped process is not ready, whatever its last beat said."""
    heartbeat_path(process_type).unlink(missing_ok=True)


def readiness(process_type: str = "web", *, max_age_seconds: float | None = None) -> tuple[bool, dict]:
    """(ready, checks): each check is "ok", "unavailable" or "not used"; for the scheduler and the
    worker also the heartbeat's age."""
    timeout = settings.CHIME_READINESS_TIMEOUT_SECONDS
    checks: dict = {"database": check_database(timeout), "redis": check_redis(timeout)}
    if process_type in ("scheduler", "worker", "ops"):
        age = heartbeat_age(process_type)
        limit = max_age_seconds if max_age_seconds is not None else settings.CHIME_HEARTBEAT_MAX_AGE_SECONDS
        checks["heartbeat"] = OK if age is not None and age <= limit else UNAVAILABLE
        checks["heartbeat_age_seconds"] = None if age is None else round(age, 1)
    ready = all(value in (OK, NOT_USED) for key, value in checks.items() if not key.endswith("_seconds"))
    return ready, checks


class HealthMiddleware:
    """Answers /healthz, /readyz and /metrics (apps/metrics/exposition.py) before any other
    middleware runs (see the module docstring)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path == "/healthz":
            return JsonResponse({"status": "ok"})
        if request.path == "/metrics":  # token-protected; Prometheus addresses the pod's IP too
            from apps.metrics.exposition import web_metrics

            return web_metrics(request)
        if request.path == "/readyz":
            ready, checks = readiness("web")
            body = {"status": "ready" if ready else "unready", "checks": checks}
            return JsonResponse(body, status=200 if ready else 503)
        return self.get_response(request)
