"""Quarantine: a definition the scheduler cannot plan is paused with a reason, not retried forever.

One row whose planning raises (a zone tzdata no longer has, an expression an upgraded parser
rejects, a corrupt field) must not roll back its batch: an ordered due-scan would pick the same
row first again on every step and nothing behind it would ever fire. So the scheduler plans every
row of a batch, sets the rows that raised aside, materializes the rest, and pauses those rows in
the same transaction, with a `status_reason` the tenant can act on. Resuming such a job checks
its schedule again (apps.jobs.services.job_resume).

Safe with several schedulers: the rows are locked by the due-scan (`FOR UPDATE SKIP LOCKED`), and
the pause is conditional on the row still being active, so a row is quarantined (and logged) once.
"""

import logging
from datetime import datetime

import psycopg
from django.db import DataError, IntegrityError, transaction

from apps.jobs.models import JobDefinition, JobStatus
from apps.jobs.planning import planning_problem
from apps.jobs.schedules import ScheduleError, zone_database_available

logger = logging.getLogger("apps.scheduler")

UNPLANNABLE = ("Paused by Chime: its schedule could not be evaluated: ", " Fix the schedule and resume the job.")
UNWRITABLE = ("Paused by Chime: its runs could not be recorded: ", " Check the job's settings and resume it.")

# What one poisoned row makes PostgreSQL refuse (a value, a constraint). Anything else (a lost
# connection, a timeout, a bug raising for every row) fails the step instead.
ROW_DATA_ERRORS = (DataError, IntegrityError, psycopg.DataError, psycopg.IntegrityError)


def quarantine_reason(error: Exception, kind: tuple[str, str] = UNPLANNABLE) -> str:
    """'Paused by Chime: its schedule could not be evaluated: unknown time zone 'Mars/Olympus'. ...'
    (at most 500 characters, JobDefinition.status_reason)."""
    _, problem = planning_problem(error)
    if isinstance(error, ScheduleError) and problem[:2].istitle():  # "Unknown ..." -> "unknown ...", not "IANA"
        problem = problem[0].lower() + problem[1:]
    if not problem.endswith((".", "!", "?")):
        problem += "."
    prefix, suffix = kind
    return f"{prefix}{problem}{suffix}"


class ZoneDatabaseMissing(RuntimeError):
    """This scheduler process has no usable tz database: its step fails (and after a few, it hands
    its partitions to another scheduler) instead of quarantining every job with a zone."""


def quarantine_definitions(
    failures: list[tuple[JobDefinition, Exception]], *, now: datetime, kind: tuple[str, str] = UNPLANNABLE
) -> int:
    """Pause each (definition, error) that is still active, inside the caller's transaction, and
    log each one once, after commit (with job and tenant id; never the target or its headers).
    Returns how many were paused. Rare path: one statement per row is fine.

    Raises ZoneDatabaseMissing (pausing nothing) when a zone is unknown because this host has no
    tz database at all: another scheduler can plan those jobs."""
    zones_unknown = any(getattr(error, "field", None) == "timezone" for _, error in failures)
    if zones_unknown and not zone_database_available():
        raise ZoneDatabaseMissing(
            "this scheduler has no usable tz database (zoneinfo finds no zone): install tzdata on this host; "
            f"{len(failures)} definitions left as they are"
        )
    paused = 0
    for definition, error in failures:
        reason = quarantine_reason(error, kind)
        updated = JobDefinition.objects.filter(id=definition.id, status=JobStatus.ACTIVE).update(
            status=JobStatus.PAUSED, status_reason=reason, paused_at=now, updated_at=now
        )
        if updated:
            paused += 1
            transaction.on_commit(
                lambda d=definition, r=reason: logger.warning(
                    "quarantined job %s of tenant %s: %s",
                    d.id,
                    d.tenant_id,
                    r,
                    extra={"job_id": d.id, "tenant_id": d.tenant_id, "partition": d.partition},
                )
            )
    return paused
