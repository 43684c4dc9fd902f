"""Which indexes PostgreSQL's planner reads for a statement (EXPLAIN, never executed)."""

import json

from django.db import connection, transaction


def indexes_in_plan(plan) -> set[str]:
    """The index names in an EXPLAIN (FORMAT JSON) result."""
    plan = json.loads(plan) if isinstance(plan, str) else plan
    found, stack = set(), [plan[0]["Plan"]]
    while stack:
        node = stack.pop()
        if "Index Name" in node:
            found.add(node["Index Name"])
        stack.extend(node.get("Plans", []))
    return found


def indexes_read(sql: str, params) -> set[str]:
    """The index names in the plan of `sql` with `params`."""
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON) " + sql, params)
        return indexes_in_plan(cursor.fetchone()[0])


def indexes_read_by(queryset) -> set[str]:
    """The index names in the plan of a queryset's SELECT (FOR UPDATE included)."""
    with transaction.atomic():  # FOR UPDATE is compiled only inside one
        sql, params = queryset.query.sql_with_params()
        return indexes_read(sql, params)
