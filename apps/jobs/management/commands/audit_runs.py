"""Check Chime's invariants on a live database; exit non-zero if any is broken.

Only option parsing and output live here; the checks are apps/jobs/audit.py.
Exit codes: 0 all hold, 1 a violation, 2 a bad option, 3 the database could not be read.
"""

import json
from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from apps.jobs import audit
from apps.tenants.selectors import tenant_by_slug

VIOLATION = 1
USAGE_ERROR = 2
DATABASE_ERROR = 3


def _number(name: str, text: str, *, integer: bool = False) -> float:
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        value = -1
    if value < 0 or value != value or value == float("inf"):
        kind = "a whole number" if integer else "a number of seconds"
        raise CommandError(f"{name} {text!r}: expected {kind}, 0 or more.", returncode=USAGE_ERROR)
    return value


class Command(BaseCommand):
    help = (
        "Check the run invariants (no due occurrence without its run, nothing stuck, attempts "
        "recorded, no duplicates); print every violation as a table and exit 1 if there is any."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--since",
            default="24h",
            help="History checks look at rows created since: a duration (90s, 30m, 1h, 2d, 1w), an ISO "
            "datetime, or 'all'. Default 24h. Stuck/overdue checks always look at the current state.",
        )
        parser.add_argument("--tenant", default=None, metavar="SLUG", help="Only this tenant's jobs and runs.")
        parser.add_argument(
            "--grace",
            default=str(int(audit.DEFAULT_GRACE.total_seconds())),
            metavar="SECONDS",
            help="Slack added to every time threshold (default 30).",
        )
        parser.add_argument(
            "--examples", default=str(audit.DEFAULT_EXAMPLES), metavar="N", help="Example ids per invariant."
        )
        parser.add_argument(
            "--json", dest="as_json", action="store_true", help="Print one JSON object instead of a table."
        )

    def handle(self, *args, since, tenant, grace, examples, as_json, **options):
        thresholds = audit.Thresholds.from_settings(grace=timedelta(seconds=_number("--grace", grace)))
        examples = int(_number("--examples", examples, integer=True))
        try:
            scope = self._scope(since, tenant, thresholds, examples)
            violations = audit.audit(scope)
        except DatabaseError as error:
            raise CommandError(
                f"The database could not be audited: {error}".strip(), returncode=DATABASE_ERROR
            ) from None
        if as_json:
            self.stdout.write(self._json(scope, tenant, violations))
        else:
            self.stdout.write(self._table(scope, violations))
        if violations:
            rows = sum(v.count for v in violations)
            raise CommandError(f"{len(violations)} invariant(s) violated ({rows} rows).", returncode=VIOLATION)

    def _scope(self, since: str, tenant: str | None, thresholds: audit.Thresholds, examples: int) -> audit.Scope:
        now = audit.database_now()
        try:
            since_at = audit.parse_since(since, now=now)
        except ValueError as error:
            raise CommandError(str(error), returncode=USAGE_ERROR) from None
        tenant_id = None
        if tenant is not None:
            found = tenant_by_slug(tenant)
            if found is None:
                raise CommandError(f"--tenant {tenant!r}: no such tenant.", returncode=USAGE_ERROR)
            tenant_id = found.id
        return audit.Scope(now=now, thresholds=thresholds, since=since_at, tenant_id=tenant_id, examples=examples)

    def _json(self, scope, tenant, violations) -> str:
        return json.dumps(
            {
                "ok": not violations,
                "now": audit.iso(scope.now),
                "since": audit.iso(scope.since) if scope.since else None,
                "tenant": tenant,
                "thresholds_seconds": scope.thresholds.as_seconds(),
                "checked": [invariant.key for invariant in audit.INVARIANTS],
                "violations": [v.as_dict() for v in violations],
            },
            indent=2,
        )

    def _table(self, scope, violations) -> str:
        window = f"history since {audit.iso(scope.since)}" if scope.since else "all history"
        context = f"{len(audit.INVARIANTS)} invariants checked at {audit.iso(scope.now)} (database clock), {window}"
        if not violations:
            return f"audit_runs: no violations ({context})."
        header = ("invariant", "rows", "what", "examples")
        rows = [(v.invariant, str(v.count), v.title, ", ".join(v.examples)) for v in violations]
        widths = [max(len(row[i]) for row in [header, *rows]) for i in range(3)]
        lines = [f"audit_runs: {len(violations)} invariant(s) violated ({context})."]
        for row in [header, *rows]:
            lines.append("  ".join([row[0].ljust(widths[0]), row[1].rjust(widths[1]), row[2].ljust(widths[2]), row[3]]))
        return "\n".join(lines)
