"""The tenant's delivery health per job and per endpoint host (the API's GET /stats, as a page)."""

from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone

from apps.jobs.reliability import WINDOWS, tenant_reliability

from ..access import member_required

ROWS = 200


def _worst_first(health) -> tuple:
    return (-(health.attempts - health.succeeded_attempts), -health.attempts)


@member_required
def health(request):
    window = request.GET.get("window", "hour")
    if window not in WINDOWS:
        # The page itself, with the message and the valid windows as links (a bare 400 page
        # would say nothing about what to change).
        error = f"Unknown window {window[:24]!r}: choose one of {', '.join(WINDOWS)}."
        return render(request, "dashboard/health.html", {"error": error, "windows": list(WINDOWS)}, status=400)
    report = tenant_reliability(tenant=request.tenant, now=timezone.now(), window=window)
    jobs = sorted(report.jobs.items(), key=lambda item: _worst_first(item[1][1]))[:ROWS]
    hosts = sorted(report.hosts.items(), key=lambda item: _worst_first(item[1]))[:ROWS]
    context = {
        "report": report,
        "windows": list(WINDOWS),
        "jobs": [
            {"label": name, "url": reverse("dashboard:job_detail", args=[job_id]), "health": h}
            for job_id, (name, h) in jobs
        ],
        "hosts": [{"label": host, "url": None, "health": h} for host, h in hosts],
    }
    return render(request, "dashboard/health.html", context)
