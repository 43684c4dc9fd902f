"""Load one phase of the isolation bench into the scenario's database: groups of `once` jobs.

Runs as its own process in the Chime tree under test (PYTHONPATH, cwd and Django settings of the
scenario, never the caller's), like bench/chaos/load.py: tenants and one template job per group
are made by that tree's own services, then the template's row is repeated with COPY, each row with
its own id, tenant, target URL and fire time. Only `apps` and Django come from the tree under
test; this file uses nothing of the tree's bench/.

Reads a JSON spec on stdin:
    {"lead": 4, "groups": [{"name": "a", "tenants": ["iso-a"], "urls": ["http://127.0.0.2:P/hold/25/a-"],
      "count": 60, "offset": 0, "step": 0, "timeout_seconds": 30, "max_attempts": 1}, ...]}
Row k of a group belongs to tenants[k % len(tenants)], targets urls[k % len(urls)] + str(k) and is
due at first + offset + k * step seconds. Prints one JSON line: {"fire_at": unix seconds of
`first`, "tenants": {slug: id}}.
"""

from __future__ import annotations

import io
import json
import os
import sys
import time
import zlib
from datetime import UTC, datetime, timedelta

FIXED = ("id", "tenant_id", "name", "run_at", "next_fire_at", "partition", "target_url")


def uuid7_hex(count: int) -> list[str]:
    """Increasing UUIDv7 ids (48-bit ms timestamp, version 7, counter, variant 10, random)."""
    ms = int(time.time() * 1000)
    randomness = os.urandom(8 * count)
    out = []
    for k in range(count):
        head = ((ms + (k >> 12)) << 16) | 0x7000 | (k & 0x0FFF)
        tail = bytearray(randomness[8 * k : 8 * k + 8])
        tail[0] = 0x80 | (tail[0] & 0x3F)
        out.append((head.to_bytes(8, "big") + bytes(tail)).hex())
    return out


def template_row(cur, *, tenant, group: dict) -> tuple[list[str], list[str]]:
    """(other column names, their COPY text) of one job made by the tree's job_create()."""
    from psycopg import sql

    from apps.jobs.services import job_create

    definition = job_create(
        tenant=tenant,
        name="isolation-template",
        schedule_type="once",
        run_at=datetime.now(UTC) + timedelta(days=3650),
        target_url=group["urls"][0] + "0",
        target_body={"bench": True},
        timeout_seconds=group["timeout_seconds"],
        retry_max_attempts=group.get("max_attempts", 1),
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
    cur.execute("DELETE FROM jobs_jobdefinition WHERE id = %s", [definition.id])
    values = dict(zip(columns, line.split("\t"), strict=True))
    others = [c for c in columns if c not in FIXED]
    return others, [values[c] for c in others]


def tenant_for(slug: str):
    from apps.tenants.models import Tenant
    from apps.tenants.services import tenant_create

    return Tenant.objects.filter(slug=slug).first() or tenant_create(slug=slug, name=f"Isolation {slug}")


def load(spec: dict) -> dict:
    import django

    django.setup()
    import psycopg
    from django.conf import settings

    from apps.jobs.models import partition_for

    partitions = settings.CHIME_PARTITIONS
    tenants = {slug: tenant_for(slug) for group in spec["groups"] for slug in group["tenants"]}
    with psycopg.connect(os.environ["DATABASE_URL"]) as conn, conn.cursor() as cur:
        templates = [template_row(cur, tenant=tenants[g["tenants"][0]], group=g) for g in spec["groups"]]
        conn.commit()
        # The fire time is fixed only now, so the lead is measured from a ready load.
        first = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=spec.get("lead", 4) + 1)
        buf = io.StringIO()
        copies = []
        for group, (others, constant) in zip(spec["groups"], templates, strict=True):
            ids = uuid7_hex(group["count"])
            buf = io.StringIO()
            for k, id_hex in enumerate(ids):
                fire = (first + timedelta(seconds=group.get("offset", 0) + k * group.get("step", 0))).isoformat()
                tenant = tenants[group["tenants"][k % len(group["tenants"])]]
                url = group["urls"][k % len(group["urls"])] + str(k)
                partition = zlib.crc32(bytes.fromhex(id_hex)) % partitions
                row = [id_hex, str(tenant.id), f"iso-{group['name']}-{k}", fire, fire, str(partition), url, *constant]
                buf.write("\t".join(row) + "\n")
            copies.append((others, buf.getvalue()))
        for others, text in copies:
            columns = ", ".join(f'"{c}"' for c in (*FIXED, *others))
            with cur.copy(f"COPY jobs_jobdefinition ({columns}) FROM STDIN") as copy:
                copy.write(text)
        conn.commit()
        cur.execute("ANALYZE jobs_jobdefinition")
        sample = cur.execute("SELECT id, partition FROM jobs_jobdefinition LIMIT 200").fetchall()
        conn.commit()
    bad = [(i, p) for i, p in sample if partition_for(i) != p]
    assert not bad, f"partition formula differs from partition_for() for {len(bad)} sampled rows"
    if time.time() > first.timestamp() - 0.5:
        raise SystemExit("the load took longer than the lead; raise the lead")
    return {"fire_at": first.timestamp(), "tenants": {slug: str(t.id) for slug, t in tenants.items()}}


def main() -> None:
    print(json.dumps(load(json.loads(sys.stdin.read()))), flush=True)


if __name__ == "__main__":
    main()
