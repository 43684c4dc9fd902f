"""bench/row_designs.py in a small form, on the tests' database: what docs/scaling.md (item 1)
concludes from it holds only if its two designs are what it says. The current design is the
model's table as migrated, and none of its status updates can be HOT. The other design's release
and claim can be HOT, given room on the page. Every run ends up `succeeded` under both. No speed is
asserted: the costs are measured by `python -m bench.row_designs` and recorded in
docs/benchmarks.md."""

import pytest
from django.db import connection

from bench.common import pg_connect
from bench.row_designs import attempts, life

pytestmark = pytest.mark.django_db(transaction=True)


def _dsn() -> str:
    s = connection.settings_dict
    return (
        f"postgresql://{s.get('USER') or 'postgres'}@{s.get('HOST') or '127.0.0.1'}:{s.get('PORT') or 5432}/{s['NAME']}"
    )


def _indexes(table: str) -> set[str]:
    """Each index of `table` as its definition, with the table's name taken out."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE tablename = %s", [table])
        return {row[0].split(" USING ", 1)[1] for row in cursor.fetchall()}


def test_current_design_copies_the_model_and_no_status_update_is_hot():
    from bench.row_designs import create

    with connection.cursor() as cursor:
        create(cursor, "bench_rows_probe", "current", 100)
    try:
        assert _indexes("bench_rows_probe") == _indexes("jobs_jobrun")
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE bench_rows_probe")
    current = life("current@100", 600, dsn=_dsn())
    assert current["hot"] == 0.0
    assert current["succeeded"] == 600


@pytest.fixture
def old_snapshot():
    """A transaction in the same database holding a snapshot from before the runs exist, as a long
    dashboard query, an ANALYZE or a forgotten transaction would: no row version dead since can be
    pruned while it is open."""
    with pg_connect(_dsn()) as holder:
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT txid_current()")
        yield
        holder.execute("ROLLBACK")


def test_hot_design_makes_release_and_claim_hot_when_the_page_has_room(old_snapshot):
    # Fillfactor 30 leaves a page room for a row's two new versions without pruning anything, so
    # the old snapshot cannot stop them being HOT. Three updates a run, of which release and claim.
    roomy = life("hot@30", 600, dsn=_dsn())
    assert roomy["hot"] == pytest.approx(2 / 3, abs=0.01)
    assert roomy["succeeded"] == 600
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass('bench_rows_hot')")
        assert cursor.fetchone()[0] is None  # dropped after measuring


def test_at_fillfactor_50_the_claim_is_hot_only_where_pruning_made_room(old_snapshot):
    # Half a page holds the release's new version; the claim's needs the first version pruned,
    # which the old snapshot forbids (docs/scaling.md, item 1).
    half = life("hot@50", 600, dsn=_dsn())
    assert half["hot"] == pytest.approx(1 / 3, abs=0.01)
    assert half["succeeded"] == 600


def test_attempts_take_less_room_without_their_derived_headers():
    every, stored, none = (attempts(variant, 2000, dsn=_dsn())["bytes"] for variant in ("all", "stored", "none"))
    assert every > stored > none
