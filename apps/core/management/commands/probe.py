"""Exec probe of a process type: `manage.py probe web|scheduler|worker` (docs/operations.md#health-checks).

The scheduler and the worker serve no HTTP, so an orchestrator probes them by running this in
their container: exit 0 when PostgreSQL and Redis answer and (scheduler, worker) the process's
heartbeat is younger than --max-age-seconds; exit 1 and the failing checks otherwise."""

import json

from django.core.management.base import BaseCommand, CommandError

from apps.core.health import readiness


class Command(BaseCommand):
    help = "Readiness of a process type: exit 0 when ready, 1 (with the failing checks) when not."

    def add_arguments(self, parser):
        parser.add_argument("process_type", choices=["web", "scheduler", "worker", "ops"])
        parser.add_argument(
            "--max-age-seconds",
            type=float,
            default=None,
            help="Oldest acceptable heartbeat (default CHIME_HEARTBEAT_MAX_AGE_SECONDS).",
        )

    def handle(self, *args, process_type, max_age_seconds, **options):
        if max_age_seconds is not None and max_age_seconds <= 0:
            raise CommandError("--max-age-seconds must be positive.")
        ready, checks = readiness(process_type, max_age_seconds=max_age_seconds)
        line = json.dumps({"process": process_type, "status": "ready" if ready else "unready", "checks": checks})
        if not ready:
            raise CommandError(line)
        self.stdout.write(line)
