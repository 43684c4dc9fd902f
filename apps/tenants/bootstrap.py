"""What `./chime run` does before it starts the processes: make sure the PostgreSQL database exists,
and give the demo tenant one working API key.

The README's PostgreSQL command names a database (`.../chime`) that a fresh server does not have;
creating it here turns a traceback from `migrate` into a working first run.
"""

from dataclasses import dataclass

import psycopg
from django.db import connections
from psycopg import errors, sql

from .models import ApiKey, Tenant
from .services import CreatedApiKey, api_key_create

# Databases every PostgreSQL server has, to connect to while the configured one does not exist yet
# (the same two Django's test runner tries).
MAINTENANCE_DATABASES = ("postgres", "template1")
CONNECT_TIMEOUT_SECONDS = 5


class DatabaseSetupError(Exception):
    """The database is missing and cannot be created; the message says why and what to do."""


@dataclass(frozen=True)
class DatabaseStatus:
    name: str
    created: bool  # False: it existed already


def _connect(params: dict, dbname: str) -> psycopg.Connection:
    return psycopg.connect(**{**params, "dbname": dbname}, autocommit=True, connect_timeout=CONNECT_TIMEOUT_SECONDS)


def _where(params: dict) -> str:
    return f"{params.get('user', '')}@{params.get('host', 'localhost')}:{params.get('port', 5432)}"


def database_ensure(alias: str = "default") -> DatabaseStatus | None:
    """Create the PostgreSQL database of `alias` if it does not exist. None for other engines
    (SQLite creates its file itself). Idempotent, and safe when two processes race (the loser sees
    DuplicateDatabase and reports "existed")."""
    connection = connections[alias]
    if connection.vendor != "postgresql":
        return None
    params = connection.get_connection_params()  # what Django itself would pass to psycopg.connect
    name = params["dbname"]
    try:
        _connect(params, name).close()
        return DatabaseStatus(name=name, created=False)
    except psycopg.OperationalError as error:
        target_error = error  # most likely "does not exist"; we learn which below
    maintenance = None
    maintenance_error = None
    for dbname in MAINTENANCE_DATABASES:
        try:
            maintenance = _connect(params, dbname)
            break
        except psycopg.OperationalError as error:
            maintenance_error = error
    if maintenance is None:
        raise DatabaseSetupError(
            f"Cannot reach PostgreSQL as {_where(params)} to create the database {name!r}: "
            f"{_first_line(maintenance_error)}. Is the server running, and is DATABASE_URL right?"
        )
    with maintenance:
        exists = maintenance.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if exists:
            raise DatabaseSetupError(
                f"The database {name!r} exists, but connecting to it as {_where(params)} failed: "
                f"{_first_line(target_error)}"
            )
        try:
            maintenance.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        except errors.DuplicateDatabase:
            return DatabaseStatus(name=name, created=False)
        except errors.InsufficientPrivilege as error:
            raise DatabaseSetupError(
                f"The database {name!r} does not exist and {params.get('user', 'this user')!r} may not create "
                f"databases ({_first_line(error)}). Create it as a superuser: createdb -h {params.get('host', '')} "
                f"-p {params.get('port', 5432)} -O {params.get('user', '')} {name}, or grant CREATEDB."
            ) from None
    return DatabaseStatus(name=name, created=True)


def _first_line(error: Exception | None) -> str:
    text = str(error or "unknown error").strip()
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


# The label bootstrap_demo has always given its key; it is how the previous start's key is found.
DEMO_KEY_NAME = "demo"


def demo_api_key_replace(*, tenant: Tenant) -> CreatedApiKey:
    """A fresh demo key, in place of the ones earlier starts made.

    Keys are stored hashed, so the previous raw key cannot be printed again. Deleting it (rather than
    adding one key per start, or keeping revoked rows) leaves exactly one demo key, active, however
    often Chime is started. Only keys labelled DEMO_KEY_NAME go: keys the user made stay."""
    ApiKey.objects.for_tenant(tenant).filter(name=DEMO_KEY_NAME).delete()
    return api_key_create(tenant=tenant, name=DEMO_KEY_NAME)
