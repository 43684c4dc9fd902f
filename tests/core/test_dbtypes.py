"""timestamptz values are read by psycopg's C loader (apps/core/dbtypes.py) and equal, tzinfo
included, to what Django's own loader gives."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.db.backends.postgresql.psycopg_any import register_tzloader
from psycopg.pq import Format

from apps.core.dbtypes import UtcTimestamptzLoader

pytestmark = pytest.mark.django_db

SQL = """SELECT v FROM unnest(%s::timestamptz[]) WITH ORDINALITY AS t(v, i) ORDER BY i"""

VALUES = [
    datetime(2026, 12, 1, 23, 59, 59, 999999, tzinfo=UTC),
    datetime(2026, 3, 29, 1, 30, tzinfo=UTC),  # a DST change in Europe: nothing to UTC
    datetime(1969, 12, 31, 23, 59, 59, 1, tzinfo=UTC),
    datetime(1, 1, 1, tzinfo=UTC),
    datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC),
    datetime(2026, 6, 1, 12, tzinfo=UTC) + timedelta(microseconds=10),
]


def _read(cursor, values=VALUES) -> list:
    cursor.execute(SQL, [values])
    return [row[0] for row in cursor.fetchall()]


def test_connections_read_timestamptz_with_the_c_loader():
    connection.ensure_connection()
    adapters = connection.connection.adapters
    assert adapters.get_loader(adapters.types["timestamptz"].oid, Format.TEXT) is UtcTimestamptzLoader


def test_values_equal_djangos_own_loader_tzinfo_included():
    with connection.cursor() as cursor:
        ours = _read(cursor)
        register_tzloader(connection.timezone, cursor.cursor)  # Django's Python loader, this cursor only
        djangos = _read(cursor)
    assert ours == VALUES
    assert djangos == VALUES
    assert [v.tzinfo for v in ours] == [v.tzinfo for v in djangos] == [UTC] * len(VALUES)
    assert [v.isoformat() for v in ours] == [v.isoformat() for v in djangos]


def test_a_session_in_another_timezone_still_gives_utc():
    """Django sets the session to UTC; should something change it, values still come back right."""
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL TIME ZONE 'America/New_York'")
        values = [v for v in VALUES if v.year > 1]  # year 1 UTC is 1 BC in New York: no datetime
        ours = _read(cursor, values)
    assert ours == values
