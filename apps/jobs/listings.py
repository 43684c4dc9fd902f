"""Reads for the dashboard's lists: jobs with their last run, filtered runs, dead letters, a job's
recent history. Every function takes the tenant (or a job already scoped to one)."""

from collections.abc import Iterable
from datetime import datetime

from django.db.models import OuterRef, Q, QuerySet, Subquery

from apps.tenants.models import Tenant

from .models import JobDefinition, JobRun, JobStatus, RunAttempt
from .selectors import dead_letters_matching, job_list, run_list

JOB_STATUS_FILTERS = (JobStatus.ACTIVE, JobStatus.PAUSED, JobStatus.COMPLETED)


def _last_run(field: str) -> Subquery:
    # Served by jobrun_unique_occurrence (definition, scheduled_for), read backwards.
    return Subquery(JobRun.objects.filter(definition=OuterRef("pk")).order_by("-scheduled_for").values(field)[:1])


def jobs_with_last_run(*, tenant: Tenant, search: str = "", status: str = "") -> QuerySet[JobDefinition]:
    """Jobs (not deleted) annotated with `last_run_status` and `last_run_at` (its scheduled_for)."""
    jobs = job_list(tenant=tenant)
    if search:
        jobs = jobs.filter(Q(name__icontains=search) | Q(target_url__icontains=search))
    if status in JOB_STATUS_FILTERS:
        jobs = jobs.filter(status=status)
    return jobs.annotate(last_run_status=_last_run("status"), last_run_at=_last_run("scheduled_for"))


def job_with_last_run(*, tenant: Tenant, job_id) -> JobDefinition:
    return jobs_with_last_run(tenant=tenant).get(pk=job_id)


def _last_attempt(field: str) -> Subquery:
    return Subquery(RunAttempt.objects.filter(run=OuterRef("pk")).order_by("-number").values(field)[:1])


def with_last_attempt(runs: QuerySet[JobRun]) -> QuerySet[JobRun]:
    """Runs with their job, and `last_error` / `last_status_code` / `last_duration_ms` of their latest attempt."""
    return runs.select_related("definition").annotate(
        last_error=_last_attempt("error"),
        last_status_code=_last_attempt("status_code"),
        last_duration_ms=_last_attempt("duration_ms"),
    )


def runs_filtered(
    *,
    tenant: Tenant,
    status: str = "",
    job_id=None,
    scheduled_after: datetime | None = None,
    scheduled_before: datetime | None = None,
) -> QuerySet[JobRun]:
    """The tenant's runs, newest first, narrowed by status, job and scheduled time."""
    runs = run_list(tenant=tenant)
    if status:
        runs = runs.filter(status=status)
    if job_id:
        runs = runs.filter(definition_id=job_id)
    if scheduled_after:
        runs = runs.filter(scheduled_for__gte=scheduled_after)
    if scheduled_before:
        runs = runs.filter(scheduled_for__lt=scheduled_before)
    return with_last_attempt(runs)


def dead_letters(*, tenant: Tenant, job_id=None, **filters) -> QuerySet[JobRun]:
    """Failed runs (replayable) matching `filters` (selectors.dead_letters_matching), most recently failed first."""
    runs = dead_letters_matching(tenant=tenant, job=job_id, **filters)
    return with_last_attempt(runs).order_by("-finished_at", "-created_at")


def runs_by_ids(*, tenant: Tenant, run_ids: Iterable) -> list[JobRun]:
    """Runs of this tenant among `run_ids` (ids of other tenants are silently dropped), oldest first."""
    return list(with_last_attempt(run_list(tenant=tenant).filter(id__in=list(run_ids))).order_by("created_at"))


def job_history(*, job: JobDefinition, limit: int = 40) -> list[JobRun]:
    """The job's latest runs, newest first, with their last attempt's duration (for the chart)."""
    runs = JobRun.objects.filter(definition=job, tenant_id=job.tenant_id).order_by("-scheduled_for")
    return list(with_last_attempt(runs)[:limit])
