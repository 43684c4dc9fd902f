"""Load a spike into a private database: `once` jobs of a few tenants, due a few seconds ahead.

Runs as its own process with the scenario's environment (so Django is configured for the private
server, never for the caller's database). Tenants and one template job are made by the app's own
services; the spike is that template's row repeated with COPY (new UUIDv7 id, the same partition
formula as partition_for(), checked on a sample), as bench/common.py does. Prints one JSON line:
{"fire_at": unix seconds of the first occurrence, "last_fire_at": ..., "tenants": [...]}.

    PYTHONPATH=. python bench/chaos/load.py --count 3000 --tenants 3 --lead 5 --url http://127.0.0.1:N/hook
"""

from __future__ import annotations

import argparse
import io
import json
import os
import time
from datetime import UTC, datetime, timedelta

# From the checkout under test (PYTHONPATH), like `apps`: this file may run against another tree.
from bench.common import VARIABLE_COLUMNS, copy_text_time, partition_of, uuid7_bytes


def template_row(cur, *, tenant, target_url: str) -> tuple[list[str], str]:
    """The other columns and their COPY text of one job made by job_create() (then deleted)."""
    from psycopg import sql

    from apps.jobs.services import job_create

    far = datetime.now(UTC) + timedelta(days=3650)
    definition = job_create(
        tenant=tenant, name="chaos-template", schedule_type="once", run_at=far, target_url=target_url
    )
    columns = [
        row[0]
        for row in cur.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = 'jobs_jobdefinition'::regclass "
            "AND attnum > 0 AND NOT attisdropped ORDER BY attnum"
        ).fetchall()
    ]
    query = sql.SQL("COPY (SELECT * FROM jobs_jobdefinition WHERE id = {}) TO STDOUT").format(
        sql.Literal(str(definition.id))
    )
    with cur.copy(query) as copy:
        line = b"".join(bytes(chunk) for chunk in copy).decode().rstrip("\n")
    definition.delete()
    values = dict(zip(columns, line.split("\t"), strict=True))
    others = [c for c in columns if c not in VARIABLE_COLUMNS]
    return others, "\t".join(values[c] for c in others)


def load(*, count: int, tenant_count: int, lead: float, spread: float, target_url: str) -> dict:
    import django

    django.setup()
    import psycopg
    from django.conf import settings

    from apps.jobs.models import partition_for
    from apps.tenants.selectors import signing_secrets_valid
    from apps.tenants.services import tenant_create

    assert settings.CHIME_PARTITIONS == 64, "bench.common.partition_of assumes CHIME_PARTITIONS=64"
    tenants = [tenant_create(slug=f"chaos-{i}", name=f"Chaos {i}") for i in range(tenant_count)]
    assert all(signing_secrets_valid(tenant=t) for t in tenants)
    with psycopg.connect(os.environ["DATABASE_URL"]) as conn, conn.cursor() as cur:
        others, constant = template_row(cur, tenant=tenants[0], target_url=target_url)
        conn.commit()
        # The fire time is fixed only now, so the lead is measured from a ready load.
        first = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=lead + 1)
        step = spread / count if spread else 0.0
        fires = [copy_text_time(first + timedelta(seconds=step * k)) for k in range(count)] if step else None
        first_text = copy_text_time(first)
        columns = ", ".join(f'"{c}"' for c in (*VARIABLE_COLUMNS, *others))
        buf = io.StringIO()
        for k, id_bytes in enumerate(uuid7_bytes(count)):
            fire = fires[k] if fires else first_text
            tenant_id = tenants[k % tenant_count].id
            buf.write(
                f"{id_bytes.hex()}\t{tenant_id}\tchaos-{k}\t{fire}\t{fire}\t{partition_of(id_bytes)}\t{constant}\n"
            )
        with cur.copy(f"COPY jobs_jobdefinition ({columns}) FROM STDIN") as copy:
            copy.write(buf.getvalue())
        conn.commit()
        cur.execute("ANALYZE jobs_jobdefinition")
        sample = cur.execute("SELECT id, partition FROM jobs_jobdefinition LIMIT 500").fetchall()
        conn.commit()
    bad = [(i, p) for i, p in sample if partition_for(i) != p]
    assert not bad, f"partition mismatch for {len(bad)} sampled rows"
    if time.time() > first.timestamp() - 1:
        raise SystemExit("the load took longer than the lead; raise --lead")
    return {
        "fire_at": first.timestamp(),
        "last_fire_at": (first + timedelta(seconds=step * (count - 1))).timestamp(),
        "tenants": [str(t.id) for t in tenants],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--tenants", type=int, default=3)
    parser.add_argument("--lead", type=float, default=5.0, help="seconds from the end of the load to the spike")
    parser.add_argument("--spread", type=float, default=0.0, help="spread the occurrences over this many seconds")
    parser.add_argument("--url", required=True)
    args = parser.parse_args()
    result = load(count=args.count, tenant_count=args.tenants, lead=args.lead, spread=args.spread, target_url=args.url)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
