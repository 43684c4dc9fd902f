"""Live-update events: tell dashboards that runs changed.

Call `runs_changed` after the change is committed (it is best effort: a lost event only delays
a dashboard until its next refresh, it never loses a run).
"""

from collections.abc import Iterable


def runs_changed(changes: Iterable[tuple]) -> None:
    """`changes`: (tenant_id, run_id) pairs whose run was created or changed status."""
    # Implemented with the dashboard's live updates (issue 6).
    return None
