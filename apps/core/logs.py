"""Structured logs: one JSON object per line when LOG_FORMAT=json (docs/operations.md#logs).

Log aggregators (Loki, CloudWatch, Datadog) index fields, not prose, so an operator can ask "every
line about run X" or "every error of tenant 7". The fields that say what a line is about come from
two places:

- `extra=` on the call (`logger.warning("...", extra={"run_id": run.id})`), and
- `log_context(...)`: fields bound for a block, kept in a contextvar (this thread or asyncio task),
  so a line logged deep inside a service still names the run or the partition it was for without
  passing them down; and `bind(worker=...)`: fields of the whole process, every thread included
  (the delivery window logs from threads of its own).

Only the names in CONTEXT_FIELDS are taken from the context, and names in NEVER_LOGGED are
dropped from every line whatever the caller passed: a signing secret, an API key, a header value
or a request body never reaches a log, even by mistake (the suite checks both).
"""

import contextlib
import contextvars
import logging

from pythonjsonlogger.json import JsonFormatter

CONTEXT_FIELDS = ("tenant_id", "job_id", "run_id", "attempt", "webhook_id", "worker", "partition")
NEVER_LOGGED = frozenset(
    {"secret", "signing_secret", "api_key", "key", "password", "token", "authorization", "headers", "body", "payload"}
)

_context: contextvars.ContextVar[dict] = contextvars.ContextVar("chime_log_context", default={})  # noqa: B039 (never mutated)


@contextlib.contextmanager
def log_context(**fields):
    """Bind fields to every line logged inside the block (this thread or task only)."""
    token = _context.set({**_context.get(), **{k: v for k, v in fields.items() if v is not None}})
    try:
        yield
    finally:
        _context.reset(token)


_process_fields: dict = {}


def bind(**fields) -> None:
    """Bind fields to every line of this process, in every thread (its worker name)."""
    _process_fields.update({k: v for k, v in fields.items() if v is not None})


class ContextFilter(logging.Filter):
    """Adds the bound context fields and the process type to each record (on the handler)."""

    def filter(self, record: logging.LogRecord) -> bool:
        from django.conf import settings

        if not hasattr(record, "process_type"):
            record.process_type = getattr(settings, "PROCESS_TYPE", "")
        for name, value in {**_process_fields, **_context.get()}.items():
            if name in CONTEXT_FIELDS and not hasattr(record, name):
                setattr(record, name, value)
        return True


class ChimeJsonFormatter(JsonFormatter):
    """python-json-logger with Chime's field names, UTC ISO-8601 times, and the NEVER_LOGGED rule."""

    def __init__(self, **kwargs):
        kwargs.setdefault("rename_fields", {"levelname": "level", "name": "logger"})
        kwargs.setdefault("timestamp", "time")
        super().__init__("%(levelname)s %(name)s %(message)s", **kwargs)

    def add_fields(self, log_data: dict, record: logging.LogRecord, message_dict: dict) -> None:
        super().add_fields(log_data, record, message_dict)
        for name in [n for n in log_data if n.lower() in NEVER_LOGGED]:
            del log_data[name]
        for name, value in list(log_data.items()):
            if name in CONTEXT_FIELDS and value is not None and not isinstance(value, (int, float, bool, str)):
                log_data[name] = str(value)  # UUIDs as their string


def log_fields(run) -> dict:
    """The `extra=` of a line about one run: its tenant, job, id (= webhook-id), attempt, partition."""
    return {
        "tenant_id": run.tenant_id,
        "job_id": run.definition_id,
        "run_id": run.id,
        "webhook_id": str(run.id),
        "attempt": run.attempt_count,
        "partition": run.partition,
    }
