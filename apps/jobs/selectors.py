"""Reads for jobs and runs. Every function takes the tenant: nothing here reads across tenants."""

from django.db.models import Exists, OuterRef, Prefetch, QuerySet

from apps.tenants.models import Tenant

from .models import JobDefinition, JobRun, JobStatus, RunAttempt, RunStatus

RECENT_RUNS = 20


def job_list(*, tenant: Tenant) -> QuerySet[JobDefinition]:
    return JobDefinition.objects.for_tenant(tenant).exclude(status=JobStatus.DELETED).order_by("-created_at")


def job_get(*, tenant: Tenant, job_id) -> JobDefinition:
    return job_list(tenant=tenant).get(pk=job_id)


def job_recent_runs(*, job: JobDefinition, limit: int = RECENT_RUNS) -> list[JobRun]:
    return list(JobRun.objects.filter(definition=job, tenant_id=job.tenant_id).order_by("-scheduled_for")[:limit])


def job_runs(*, job: JobDefinition) -> QuerySet[JobRun]:
    """All runs of a job, skipped and cancelled ones included: the job's full accounting."""
    return JobRun.objects.filter(definition=job, tenant_id=job.tenant_id)


def run_list(*, tenant: Tenant) -> QuerySet[JobRun]:
    return JobRun.objects.for_tenant(tenant).order_by("-created_at")


def run_get(*, tenant: Tenant, run_id) -> JobRun:
    attempts = Prefetch("attempts", queryset=RunAttempt.objects.order_by("number"))
    return run_list(tenant=tenant).prefetch_related(attempts).get(pk=run_id)


def dead_letters_matching(
    *, tenant: Tenant, job=None, scheduled_after=None, scheduled_before=None, error_kind="", status_code=None
) -> QuerySet[JobRun]:
    """Failed runs of the tenant matching every given filter: one job, scheduled in [after, before),
    and the error kind or HTTP status of their last attempt (the one that dead-lettered them).
    The dead-letters page lists them and a bulk replay (apps/operations) replays exactly them."""
    runs = run_list(tenant=tenant).filter(status=RunStatus.FAILED)
    if job:
        runs = runs.filter(definition_id=job)
    if scheduled_after:
        runs = runs.filter(scheduled_for__gte=scheduled_after)
    if scheduled_before:
        runs = runs.filter(scheduled_for__lt=scheduled_before)
    last = {}
    if error_kind:
        last["error_kind"] = error_kind
    if status_code is not None:
        last["status_code"] = status_code
    if last:
        final = RunAttempt.objects.filter(run=OuterRef("pk"), number=OuterRef("attempt_count"), **last)
        runs = runs.filter(Exists(final))
    return runs
