"""The history bench (bench/history.py, issue #14) in a tiny form: it loads a history that keeps
the tables' constraints, measures every request on both sides through the Procfile's web process,
runs a small spike and prunes a day. No speed is asserted here: the goals (no API or page p99
above 100 ms, the spike within 10 % of empty) are measured by `python -m bench.history` and
recorded in docs/benchmarks.md.

It runs the bench as a subprocess on its own database (`<test database>_history` on the tests'
PostgreSQL, dropped at the end) and the tests' Redis DB, with --keep so the loaded rows can be
checked afterwards.
"""

import os
import subprocess
import sys

import psycopg
import pytest
from django.conf import settings

from bench.common import ROOT

pytestmark = pytest.mark.slow


def _services_or_skip(admin: str) -> None:
    """PostgreSQL and Redis reachable, else skipped with a loud reason (an error in CI)."""
    import redis

    try:
        psycopg.connect(f"{admin}/postgres", connect_timeout=2).close()
        redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2).ping()
    except (psycopg.OperationalError, redis.RedisError) as error:
        message = f"the history bench needs PostgreSQL and Redis: {error}"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI: {message}", pytrace=False)
        pytest.skip(f"!!! SKIPPED: {message}")


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory):
    db = settings.DATABASES["default"]
    name = f"{db['TEST']['NAME']}_history"
    admin = f"postgresql://{db.get('USER') or 'postgres'}@{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}"
    _services_or_skip(admin)
    with psycopg.connect(f"{admin}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    md = tmp_path_factory.mktemp("history") / "history.md"
    env = {**os.environ, "CHIME_BENCH_DB": name, "CHIME_BENCH_REDIS_URL": settings.REDIS_URL}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    command = [sys.executable, "-m", "bench.history", "--runs", "2000", "--days", "2", "--spike-runs", "100"]
    command += ["--requests", "3", "--target-seconds", "1", "--keep", "--md", str(md)]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=170)
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    conn = psycopg.connect(f"{admin}/{name}", autocommit=True)
    yield md.read_text(), conn
    conn.close()
    with psycopg.connect(f"{admin}/postgres", autocommit=True) as admin_conn:
        admin_conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.timeout(240)
def test_report_has_both_sides_of_every_request_the_spike_disk_and_prune(bench_run):
    text, _conn = bench_run
    lines = text.splitlines()
    requests = [line for line in lines if line.startswith("| API GET") or line.startswith("| page /")]
    assert len(requests) == 15, text
    for line in requests:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if "fewer than 50 pages" in cells[-1]:
            continue  # a deep cursor the tiny history does not reach
        assert all(cell.endswith(" ms") for cell in cells[3:5]), line  # both history p50 and p99
    spike = [line for line in lines if line.startswith("| spike of 100: all delivered")]
    assert len(spike) == 1 and "—" not in spike[0], text
    assert any(line.startswith("| both |") for line in lines), text
    # The tree has apps/history, so the bench times its prune_tenant (plain batched SQL otherwise).
    (prune,) = [line for line in lines if "apps.history prune_tenant" in line]
    assert int(prune.split("|")[2].strip().replace(",", "")) > 0, prune  # runs deleted


@pytest.mark.timeout(240)
def test_loaded_history_keeps_the_constraints_and_has_the_status_mix(bench_run):
    _text, conn = bench_run
    constraints = {row[0] for row in conn.execute("SELECT conname FROM pg_constraint WHERE contype IN ('u', 'f')")}
    assert {"jobrun_unique_occurrence", "runattempt_unique_number"} <= constraints
    indexes = {row[0] for row in conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'jobs_jobrun'")}
    assert {"jobrun_tenant_created_idx", "jobrun_due_idx"} <= indexes  # rebuilt after the load
    statuses = dict(conn.execute("SELECT status, count(*) FROM jobs_jobrun GROUP BY status").fetchall())
    assert statuses.get("succeeded", 0) > 10 * statuses.get("failed", 0) > 0, statuses
    assert statuses.get("scheduled", 0) > 0, statuses
    tries = dict(conn.execute("SELECT attempt_count, count(*) FROM jobs_jobrun GROUP BY 1").fetchall())
    assert set(tries) <= {0, 1, 2, 3} and tries.get(1) and tries.get(3), tries
    # Every attempt belongs to a loaded run (FK checks were off while loading) and matches its count.
    orphans = conn.execute(
        "SELECT count(*) FROM jobs_runattempt a LEFT JOIN jobs_jobrun r ON r.id = a.run_id WHERE r.id IS NULL"
    ).fetchone()[0]
    assert orphans == 0
    mismatched = conn.execute(
        "SELECT count(*) FROM jobs_jobrun r WHERE r.attempt_count <> "
        "(SELECT count(*) FROM jobs_runattempt a WHERE a.run_id = r.id)"
    ).fetchone()[0]
    assert mismatched == 0
    tenants = conn.execute("SELECT count(DISTINCT tenant_id) FROM jobs_jobrun").fetchone()[0]
    assert tenants >= 2
