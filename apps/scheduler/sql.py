"""Set-based writes for the scheduler's hot path.

PostgreSQL gets one statement per batch (`unnest` arrays); other databases (SQLite in embedded
mode) get the portable ORM equivalent, which is correct but slower. Runs are inserted the same
way by apps.jobs.planning.insert_run_rows.
"""

from collections import defaultdict
from datetime import datetime

from django.db import connection

from apps.jobs.models import JobDefinition


def advance_definitions(updates: list[tuple], *, now: datetime) -> None:
    """Apply (id, next_fire_at, status, last_scheduled_for) to each definition."""
    if not updates:
        return
    if connection.vendor == "postgresql":
        ids, next_fire, statuses, last = (list(column) for column in zip(*updates, strict=True))
        with connection.cursor() as cursor:
            cursor.execute(
                """
                UPDATE jobs_jobdefinition AS d
                   SET next_fire_at = u.next_fire_at, status = u.status,
                       last_scheduled_for = u.last_scheduled_for, updated_at = %s
                  FROM unnest(%s::uuid[], %s::timestamptz[], %s::varchar[], %s::timestamptz[])
                       AS u(id, next_fire_at, status, last_scheduled_for)
                 WHERE d.id = u.id
                """,
                [now, ids, next_fire, statuses, last],
            )
        return
    groups: dict[tuple, list] = defaultdict(list)
    for definition_id, next_fire_at, status, last_scheduled_for in updates:
        groups[(next_fire_at, status, last_scheduled_for)].append(definition_id)
    for (next_fire_at, status, last_scheduled_for), ids in groups.items():
        JobDefinition.objects.filter(id__in=ids).update(
            next_fire_at=next_fire_at, status=status, last_scheduled_for=last_scheduled_for, updated_at=now
        )
