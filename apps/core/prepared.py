"""Prepared statements for the fixed statements of the hot path (PostgreSQL).

Django's psycopg backend binds parameters on the client (psycopg's ClientCursor), so PostgreSQL
parses and plans every statement each time it is sent. For the worker's per-batch statements
(the claim, the recording of successes, the peek, the job locks, the signing secrets) and the
scheduler's release flip the plan is always the same, primary-key probes by `id = ANY(...)`, and
planning it cost a sixth of the worker's database CPU: pg_stat_statements with track_planning,
`bench.delivery_stages --worker`, 0.5 ms of planning per claim of ~25 runs against 1.1 ms of
execution (docs/benchmarks.md, "Issue #12, eighth session").

`prepared_cursor()` is Django's cursor (its error wrapping, its query log in tests) over a
server-side-binding psycopg cursor that prepares each statement on its connection the first time
it runs it and then only binds and executes it. Only statements whose every plan is the one
wanted belong here: a prepared statement may switch to a generic plan after five executions, and
the statements that pick runs by id are fenced against the partial indexes on `status` whatever
plan is made (apps/jobs/transitions.py `_sql_in(fenced=True)`); tests/jobs/test_fenced_plans.py
reads the generic plans.

CHIME_DB_PREPARED_STATEMENTS=false turns it off, for a connection pooler in transaction mode that
cannot carry prepared statements (PgBouncer before 1.21, or without max_prepared_statements).
"""

import re
from contextlib import contextmanager
from functools import cache

from django.conf import settings
from django.db import connection

from .ids import id_text


@cache
def _preparing_cursor_class():
    from django.db.backends.postgresql.base import ServerBindingCursor

    class PreparingCursor(ServerBindingCursor):
        """Server-side binding, and every statement prepared (psycopg keeps the names per
        connection, up to its `prepared_max`). The settings' prepare_threshold is one no
        statement reaches, so nothing else is prepared (config/settings/base.py)."""

        def execute(self, query, params=None, *, prepare=None, binary=None):
            return super().execute(query, params, prepare=True if prepare is None else prepare, binary=binary)

    return PreparingCursor


# An array's text form whose elements are hex digits and dashes only: nothing a cast could read as
# more (or other) elements than the ids given.
_ID_ARRAY_RE = re.compile(r"\{[0-9A-Fa-f-]+(?:,[0-9A-Fa-f-]+)*\}")


def id_array(ids) -> str:
    """The ids (uuids or their strings) as PostgreSQL's text form of an array, `{id,id,...}`, for a
    parameter the statement casts (`%s::uuid[]`).

    psycopg dumps a list element by element in Python: 474 µs for the 200 ids of a worker's
    message (~2.4 µs an id), five lists per batch on the worker's path, ~3 % of a worker
    process's CPU in a spike (py-spy --gil, issue #12); one join and one match cost ~10 µs.
    An element that is not hex and dashes alone raises ValueError here, so none can smuggle a
    comma or a brace into the array; the cast then checks each is a uuid."""
    ids = [id_text(i) for i in ids]
    if not ids:
        return "{}"
    text = "{" + ",".join(ids) + "}"
    # The match alone would take an element "a,b" for two; the comma count pins one per id.
    if not _ID_ARRAY_RE.fullmatch(text) or text.count(",") != len(ids) - 1:
        raise ValueError("ids must be uuids")
    return text


def prepared_cursor():
    """A cursor whose statements are prepared on PostgreSQL; a plain cursor elsewhere or when
    CHIME_DB_PREPARED_STATEMENTS is off. Use as `with prepared_cursor() as cursor:`."""
    if connection.vendor != "postgresql" or not settings.CHIME_DB_PREPARED_STATEMENTS:
        return connection.cursor()
    return _wrapped()


def _as_django_does(raw) -> None:
    """What Django's create_cursor does to a new cursor: its timezone, if the connection's differs."""
    from django.db.backends.postgresql.base import TIMESTAMPTZ_OID
    from django.db.backends.postgresql.psycopg_any import register_tzloader
    from psycopg.pq import Format

    tzloader = connection.connection.adapters.get_loader(TIMESTAMPTZ_OID, Format.TEXT)
    if connection.timezone != tzloader.timezone:
        register_tzloader(connection.timezone, raw)


@contextmanager
def _wrapped():
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    with connection.wrap_database_errors:
        raw = _preparing_cursor_class()(connection.connection)
        _as_django_does(raw)
        cursor = connection._prepare_cursor(raw)  # Django's wrapper: its error mapping, its query log
    with cursor:
        yield cursor


def execute_columns(sql: str, leading: list, rows: list[tuple]) -> int:
    """Run `sql` with the `leading` parameters, then one array per column of `rows`, every one bound
    in binary (`%b`) on a server-side-binding psycopg cursor over Django's connection (so inside its
    transaction); returns the rowcount. For the scheduler's per-batch writes (the runs' insert, the
    definitions' advance): Django's cursor binds on the client and dumps every array element as
    quoted text in Python, 12-17 µs per row of four columns against ~2 µs (issue #12). Errors are
    psycopg's own (not Django's wrapper), as its callers expect."""
    import psycopg

    columns = [list(column) for column in zip(*rows, strict=True)]
    connection.ensure_connection()
    with psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(sql, [*leading, *columns])
        return cursor.rowcount
