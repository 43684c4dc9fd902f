"""`manage.py create_database` (run by `./chime run` before migrate) against the real PostgreSQL server:
the README's `DATABASE_URL=postgres://postgres@127.0.0.1:5432/chime ./chime run` must work on a server
that does not have that database yet, and say clearly why when it cannot."""

import subprocess
import sys
import uuid

import psycopg
import pytest
from django.conf import settings
from psycopg import sql

from tests.support.processes import ROOT, process_env

SERVER = {"host": "127.0.0.1", "port": 5432, "user": "postgres", "dbname": "postgres", "autocommit": True}


@pytest.fixture(scope="module", autouse=True)
def postgres_server():
    from tests.conftest import _require

    db = settings.DATABASES["default"]
    _require("PostgreSQL", f"postgres://{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}", 5432)


@pytest.fixture
def fresh_name():
    """A database name nobody has; dropped afterwards whatever the test did."""
    name = f"chime_paper_fresh_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(**SERVER) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def database_exists(name: str) -> bool:
    with psycopg.connect(**SERVER) as conn:
        return conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is not None


def create_database(database_url: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", "create_database"],
        cwd=ROOT,
        env=process_env(DATABASE_URL=database_url),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_missing_database_is_created_and_a_second_call_does_nothing(fresh_name):
    url = f"postgres://postgres@127.0.0.1:5432/{fresh_name}"
    assert not database_exists(fresh_name)

    first = create_database(url)
    assert first.returncode == 0, first.stderr
    assert f"Created the PostgreSQL database '{fresh_name}'" in first.stdout
    assert database_exists(fresh_name)

    second = create_database(url)  # every `./chime run` calls it
    assert second.returncode == 0, second.stderr
    assert "Created" not in second.stdout
    assert "Traceback" not in second.stderr


def test_an_unreachable_server_is_a_clear_message_and_a_non_zero_exit(fresh_name):
    with __import__("socket").socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]

    result = create_database(f"postgres://postgres@127.0.0.1:{port}/{fresh_name}")

    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert f"Cannot reach PostgreSQL as postgres@127.0.0.1:{port}" in result.stderr
    assert "Connection refused" in result.stderr


def test_a_user_who_may_not_create_databases_is_told_so(fresh_name):
    role = f"chime_paper_nocreate_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(**SERVER) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN NOCREATEDB").format(sql.Identifier(role)))
    try:
        result = create_database(f"postgres://{role}@127.0.0.1:5432/{fresh_name}")
    finally:
        with psycopg.connect(**SERVER) as conn:
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))

    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert f"'{role}' may not create databases" in result.stderr
    assert "createdb" in result.stderr
    assert not database_exists(fresh_name)
