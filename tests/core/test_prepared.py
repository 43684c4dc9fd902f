"""apps/core/prepared.py `id_array`: the ids the hot path's statements bind as one array text."""

import uuid

import pytest
from django.db import connection

from apps.core.prepared import id_array, prepared_cursor

pytestmark = pytest.mark.django_db


def _as_postgresql_reads_it(text: str) -> list[str]:
    with prepared_cursor() as cursor:
        cursor.execute(
            "SELECT array_agg(x::text ORDER BY o) FROM unnest(%s::uuid[]) WITH ORDINALITY AS u(x, o)",
            [text],
        )
        return cursor.fetchone()[0] or []


def test_uuids_and_their_strings_arrive_as_the_same_ids_in_order():
    ids = [uuid.uuid4() for _ in range(200)]
    mixed = [str(i) if n % 2 else i for n, i in enumerate(ids)]
    assert _as_postgresql_reads_it(id_array(mixed)) == [str(i) for i in ids]


def test_no_ids_is_an_empty_array():
    assert id_array([]) == "{}"
    assert _as_postgresql_reads_it(id_array([])) == []


@pytest.mark.parametrize(
    "smuggled",
    [
        f"{uuid.uuid4()},{uuid.uuid4()}",  # one "id" that would be read as two
        f'"{uuid.uuid4()}"',
        "{" + str(uuid.uuid4()) + "}",
        f"{uuid.uuid4()} ",
        "NULL",
        "",
    ],
)
def test_anything_but_hex_and_dashes_is_refused_before_it_reaches_the_database(smuggled):
    with (
        connection.execute_wrapper(lambda *args: pytest.fail("a statement was sent")),
        pytest.raises(ValueError, match="uuids"),
    ):
        id_array([uuid.uuid4(), smuggled])
    with pytest.raises(ValueError, match="uuids"):
        id_array([smuggled])


def test_a_malformed_id_of_hex_and_dashes_is_refused_by_the_cast():
    from django.db import DataError

    with pytest.raises(DataError):
        _as_postgresql_reads_it(id_array(["abc-123"]))
