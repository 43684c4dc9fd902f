"""Runs: the live list, one run with its attempts, dead letters and replay."""

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from apps.jobs import selectors, services
from apps.jobs.listings import dead_letters as failed_runs
from apps.jobs.listings import runs_by_ids, runs_filtered
from apps.jobs.models import JobRun

from ..access import member_required
from ..forms.runs import DeadLetterFilterForm, RunFilterForm, RunSelectionForm
from ..live import POLL_SECONDS, page_live
from .common import page_of, query_without_page, redirect_back

ROW_PARTIALS = {"run": "dashboard/runs/rows.html#run-row", "dead": "dashboard/runs/rows.html#dead-row"}


def run_or_404(request, run_id) -> JobRun:
    try:
        return selectors.run_get(tenant=request.tenant, run_id=run_id)
    except JobRun.DoesNotExist as error:
        raise Http404("No such run.") from error


@member_required
def run_list(request):
    jobs = selectors.job_list(tenant=request.tenant).only("id", "name")
    form = RunFilterForm(request.GET or None, jobs=jobs)
    filters = form.filters() if form.is_bound else {}
    if form.is_bound and not form.is_valid():
        filters = {}
    live = page_live("runs", status=filters.get("status", ""), job_id=filters.get("job_id"))  # before the query
    context = {
        "form": form,
        "page": page_of(request, runs_filtered(tenant=request.tenant, **filters)),
        "query": query_without_page(request),
        "live": live,
        "show_job": True,
    }
    if request.htmx and request.htmx.target == "run-rows":
        return render(request, "dashboard/runs/list.html#run-rows", context)
    return render(request, "dashboard/runs/list.html", context)


@member_required
def run_detail(request, run_id):
    run = run_or_404(request, run_id)
    return render(request, "dashboard/runs/detail.html", {"run": run, "attempts": run.attempts.all()})


@member_required
def run_attempts(request, run_id):
    """A run's attempts, expanded under its row (HTMX); `?hide=1` folds them again."""
    run = run_or_404(request, run_id)
    context = {"run": run, "attempts": [] if request.GET.get("hide") else run.attempts.all()}
    if not request.htmx:
        return redirect("dashboard:run_detail", run_id=run.id)
    return render(request, "dashboard/runs/rows.html#attempts-row", context)


@member_required
@require_POST
def run_replay(request, run_id):
    run = run_or_404(request, run_id)
    try:
        services.run_replay(run=run)
        done, error = "Replayed: the run is scheduled again.", ""
    except services.JobActionError as failure:
        done, error = "", str(failure)
    if request.htmx:
        (row,) = runs_by_ids(tenant=request.tenant, run_ids=[run.id])
        template = ROW_PARTIALS.get(request.POST.get("row", ""), ROW_PARTIALS["run"])
        context = {"run": row, "can_manage": request.can_manage, "show_job": True, "notice": done, "error": error}
        return render(request, template, context)
    if error:
        messages.error(request, error)
    else:
        messages.success(request, done)
    return redirect_back(request, "dashboard:run_detail", run_id=run.id)


@member_required
def dead_letters(request):
    jobs = selectors.job_list(tenant=request.tenant).only("id", "name")
    form = DeadLetterFilterForm(request.GET or None, jobs=jobs)
    filters = form.filters()
    # Pushed rows know no filter but the job: a filtered page polls instead.
    live = page_live("dead") if not filters else {"mode": "poll", "poll_seconds": POLL_SECONDS, "query": ""}
    context = {
        "form": form,
        "filters": filters,
        "page": page_of(request, failed_runs(tenant=request.tenant, **filters)),
        "query": query_without_page(request),
        "live": live,
    }
    if request.htmx and request.htmx.target == "run-rows":
        return render(request, "dashboard/runs/dead_letters.html#run-rows", context)
    return render(request, "dashboard/runs/dead_letters.html", context)


@member_required
@require_POST
def dead_letters_replay(request):
    """Replay the selected failed runs. Without `confirmed`, show what would be replayed first
    (the no-JavaScript path; with HTMX the browser's confirm dialog has asked already)."""
    form = RunSelectionForm(request.POST)
    if not form.is_valid():
        text = "Select at least one failed run to replay."
        if request.htmx:
            return render(
                request, "dashboard/runs/dead_letters.html#flash", {"rows": [], "text": text, "level": "error"}
            )
        messages.error(request, text)
        return redirect("dashboard:dead_letters")
    selected = failed_runs(tenant=request.tenant).filter(id__in=form.run_ids())
    if not form.cleaned_data["confirmed"]:
        return render(request, "dashboard/runs/replay_confirm.html", {"runs": list(selected)})
    ids = list(selected.values_list("id", flat=True))
    replayed = services.runs_replay_failed(runs=selectors.run_list(tenant=request.tenant).filter(id__in=ids))
    text = f"Replayed {replayed} run{'s' if replayed != 1 else ''}."
    if request.htmx:
        rows = runs_by_ids(tenant=request.tenant, run_ids=ids)
        context = {"rows": rows, "text": text, "level": "success", "can_manage": True}
        return render(request, "dashboard/runs/dead_letters.html#flash", context)
    messages.success(request, text)
    return redirect("dashboard:dead_letters")
