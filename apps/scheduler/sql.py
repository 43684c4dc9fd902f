"""Set-based writes for the scheduler's hot path.

PostgreSQL gets one statement per batch (`unnest` arrays); other databases (SQLite in embedded
mode) get the portable ORM equivalent, which is correct but slower. Runs are inserted the same
way by apps.jobs.planning.insert_run_rows.
"""

from collections import defaultdict
from datetime import datetime

from django.db import connection

from apps.core.prepared import execute_columns
from apps.jobs.models import JobDefinition

ADVANCE_SQL = """
UPDATE jobs_jobdefinition AS d
   SET next_fire_at = u.next_fire_at, status = u.status, last_scheduled_for = u.last_scheduled_for, updated_at = %b
  FROM unnest(%b::uuid[], %b::timestamptz[], %b::varchar[], %b::timestamptz[])
       AS u(id, next_fire_at, status, last_scheduled_for)
 WHERE d.id = u.id
"""


def advance_definitions(updates: list[tuple], *, now: datetime) -> None:
    """Apply (id, next_fire_at, status, last_scheduled_for) to each definition.

    PostgreSQL: the four arrays go in binary (apps/core/prepared.py execute_columns), as the runs'
    insert sends its own; bound on the client by Django's cursor they were the largest single part
    of the scheduler's own CPU in a 100k spike (py-spy --gil: 18 %, issue #12)."""
    if not updates:
        return
    if connection.vendor == "postgresql":
        execute_columns(ADVANCE_SQL, [now], updates)
        return
    groups: dict[tuple, list] = defaultdict(list)
    for definition_id, next_fire_at, status, last_scheduled_for in updates:
        groups[(next_fire_at, status, last_scheduled_for)].append(definition_id)
    for (next_fire_at, status, last_scheduled_for), ids in groups.items():
        JobDefinition.objects.filter(id__in=ids).update(
            next_fire_at=next_fire_at, status=status, last_scheduled_for=last_scheduled_for, updated_at=now
        )
