"""Jobs: list, form (create, edit, live schedule preview), detail, pause / resume / trigger / delete."""

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from apps.jobs import selectors, services
from apps.jobs.listings import JOB_STATUS_FILTERS, job_history, job_with_last_run, jobs_with_last_run, runs_by_ids
from apps.jobs.models import JobDefinition
from apps.jobs.targets import NUL
from apps.tenants.quotas import QuotaExceeded

from ..access import manager_required, member_required
from ..charts import run_durations
from ..forms.jobs import JobForm
from ..live import page_live
from ..previews import schedule_preview as build_preview
from ..zones import timezone_names
from .common import page_of, query_without_page, redirect_back

JOB_RUNS_SHOWN = 25


def job_or_404(request, job_id) -> JobDefinition:
    try:
        return selectors.job_get(tenant=request.tenant, job_id=job_id)
    except JobDefinition.DoesNotExist as error:
        raise Http404("No such job.") from error


@member_required
def job_list(request):
    # NUL cannot reach PostgreSQL; like the length, a search box's stray bytes are trimmed, not an error.
    search, status = request.GET.get("q", "").replace(NUL, "").strip()[:100], request.GET.get("status", "")
    live = page_live("jobs")  # before the query: a change after it reaches the page live
    context = {
        "page": page_of(request, jobs_with_last_run(tenant=request.tenant, search=search, status=status)),
        "search": search,
        "status": status,
        "statuses": JOB_STATUS_FILTERS,
        "query": query_without_page(request),
        "live": live,
    }
    if request.htmx and request.htmx.target == "job-table":
        return render(request, "dashboard/jobs/list.html#job-table", context)
    return render(request, "dashboard/jobs/list.html", context)


@member_required
def job_detail(request, job_id):
    job = job_or_404(request, job_id)
    live = page_live("job", job_id=job.id)
    history = job_history(job=job, limit=JOB_RUNS_SHOWN)
    context = {
        "job": job,
        "runs": history,
        "chart": run_durations("Latency and outcome of the latest runs", history, _chart_time),
        "live": live,
        "show_job": False,
    }
    if request.htmx and request.htmx.target == "job-runs":
        return render(request, "dashboard/jobs/detail.html#job-runs", context)
    return render(request, "dashboard/jobs/detail.html", context)


def _chart_time(at) -> str:
    return timezone.localtime(at).strftime("%Y-%m-%d %H:%M:%S")


def _form_page(request, form, job=None):
    preview = build_preview(
        form.data if form.is_bound else form.initial, now=timezone.now(), viewer_zone=request.viewer_zone
    )
    context = {"form": form, "job": job, "preview": preview, "timezone_names": timezone_names()}
    return render(request, "dashboard/jobs/form.html", context)


@manager_required
def job_create(request):
    if request.method == "POST":
        form = JobForm(request.POST)
        if form.is_valid():
            try:
                job = services.job_create(tenant=request.tenant, **form.job_fields())
            except QuotaExceeded as refusal:
                form.add_error(refusal.field or None, refusal.message)
            else:
                messages.success(request, f"Job '{job.name}' created.")
                return redirect("dashboard:job_detail", job_id=job.id)
    else:
        form = JobForm(initial={name: field.initial for name, field in JobForm.base_fields.items()})
    return _form_page(request, form)


@manager_required
def job_edit(request, job_id):
    job = job_or_404(request, job_id)
    if request.method == "POST":
        form = JobForm(request.POST, job=job)
        if form.is_valid():
            # PATCH /api/v1/jobs/{id}'s service: schedule changes recompute next_fire_at and
            # cancel the runs of the old schedule that have not started.
            try:
                job = services.job_update(job=job, **form.job_fields())
            except services.JobActionError as error:
                form.add_error(None, str(error))
            except QuotaExceeded as refusal:
                form.add_error(refusal.field or None, refusal.message)
            else:
                messages.success(request, f"Job '{job.name}' saved.")
                return redirect("dashboard:job_detail", job_id=job.id)
    else:
        form = JobForm(initial=JobForm.initial_for(job))
    return _form_page(request, form, job)


@member_required
def schedule_preview(request):
    """The next fire times as the expression or time zone is typed (HTMX partial)."""
    preview = build_preview(request.GET, now=timezone.now(), viewer_zone=request.viewer_zone)
    return render(request, "dashboard/jobs/form.html#preview", {"preview": preview})


def _after_action(request, job_id, *, done: str = "", error: str = ""):
    """HTMX: the job's row, re-rendered, with the outcome in it; otherwise back to the page."""
    if request.htmx:
        job = job_with_last_run(tenant=request.tenant, job_id=job_id)
        return render(
            request,
            "dashboard/jobs/rows.html#job-row",
            {"job": job, "can_manage": request.can_manage, "notice": done, "error": error},
        )
    if error:
        messages.error(request, error)
    else:
        messages.success(request, done)
    return redirect_back(request, "dashboard:job_detail", job_id=job_id)


def _state_change(request, job_id, service, done: str):
    try:
        service(job=job_or_404(request, job_id))
    except services.JobActionError as error:
        return _after_action(request, job_id, error=str(error))
    return _after_action(request, job_id, done=done)


@member_required
@require_POST
def job_pause(request, job_id):
    return _state_change(request, job_id, services.job_pause, "Paused.")


@member_required
@require_POST
def job_resume(request, job_id):
    return _state_change(request, job_id, services.job_resume, "Resumed.")


@member_required
@require_POST
def job_trigger(request, job_id):
    job = job_or_404(request, job_id)
    try:
        run = services.job_trigger(job=job)
    except services.JobActionError as error:
        return _after_action(request, job_id, error=str(error))
    except QuotaExceeded as refusal:
        return _after_action(request, job_id, error=refusal.message)
    if request.htmx and request.htmx.target == "job-runs-head":
        # On the job's page: the new run goes on top of its runs, then updates live.
        (row,) = runs_by_ids(tenant=request.tenant, run_ids=[run.id])
        return render(
            request,
            "dashboard/runs/rows.html#run-row",
            {"run": row, "can_manage": request.can_manage, "show_job": False},
        )
    return _after_action(request, job_id, done="Triggered: a run is on its way.")


@manager_required
def job_delete(request, job_id):
    job = job_or_404(request, job_id)
    if request.method == "POST":
        services.job_delete(job=job)
        messages.success(request, f"Job '{job.name}' deleted; its run history is kept.")
        return redirect("dashboard:job_list")
    return render(request, "dashboard/jobs/delete.html", {"job": job})
