"""Bulk operations: the list, one operation with a progress bar, and starting a dead-letter replay.

The bar is polled (HTMX, every second while the operation runs) rather than pushed: progress is
written by the ops worker, which publishes no live events (apps/dashboard/live.py pushes run
changes), and one small fragment a second for an open page is cheap; polling stops with the
operation (the finished fragment carries no trigger)."""

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from apps.jobs import selectors as job_selectors
from apps.jobs.listings import dead_letters
from apps.operations import selectors, services
from apps.operations.models import OperationKind

from ..access import member_required
from ..forms.runs import DeadLetterFilterForm
from .common import page_of

POLL_SECONDS = 1


@member_required
def operation_list(request):
    page = page_of(request, selectors.operation_list(tenant=request.tenant).order_by("-id"))
    page["rows"] = selectors.with_tasks(page["rows"])
    return render(request, "dashboard/operations/list.html", {"page": page, "poll_seconds": POLL_SECONDS})


@member_required
def operation_detail(request, operation_id):
    operation = selectors.operation_get(tenant=request.tenant, operation_id=operation_id)  # Http404 if not ours
    context = {"operation": operation, "poll_seconds": POLL_SECONDS}
    if request.htmx and request.htmx.target == "operation-progress":
        return render(request, "dashboard/operations/detail.html#progress", context)
    return render(request, "dashboard/operations/detail.html", context)


@member_required
@require_POST
def dead_letters_replay_all(request):
    """Start a replay of every dead letter matching the page's filter (a bulk operation)."""
    jobs = job_selectors.job_list(tenant=request.tenant).only("id", "name")
    form = DeadLetterFilterForm(request.POST, jobs=jobs)
    if not form.is_valid():
        messages.error(request, "Fix the filter first: " + "; ".join(e for errs in form.errors.values() for e in errs))
        return go(request, reverse("dashboard:dead_letters"))
    if not dead_letters(tenant=request.tenant, **form.filters()).exists():
        messages.error(request, "No dead letters match this filter: nothing to replay.")
        return go(request, reverse("dashboard:dead_letters"))
    operation = services.operation_start(
        tenant=request.tenant,
        kind=OperationKind.REPLAY,
        params=form.operation_params(),
        created_by=f"user:{request.user.get_username()}",
    )
    return go(request, reverse("dashboard:operation_detail", kwargs={"operation_id": operation.pk}))


def go(request, url: str):
    """To another page: htmx posted the form (after its confirm dialog), so it is told to load the
    page whole (HX-Redirect), not to swap it into the form."""
    if request.htmx:
        return HttpResponse(status=204, headers={"HX-Redirect": url})
    return redirect(url)
