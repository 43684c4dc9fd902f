from django.shortcuts import render
from django.utils import timezone

from apps.jobs.stats import tenant_overview

from ..access import member_required
from ..charts import bar_chart, stacked_counts
from ..templatetags.dashboard import percent, seconds


def _minute_label(at) -> str:
    return timezone.localtime(at).strftime("%H:%M")


@member_required
def overview(request):
    stats = tenant_overview(tenant=request.tenant, now=timezone.now())
    minutes = stats.minutes
    charts = {
        "runs": stacked_counts("Finished runs per minute (succeeded, failed)", minutes, _minute_label),
        "success": bar_chart(
            "Success rate per minute",
            [(m.success_rate, "chart-ok", f"{_minute_label(m.start)}: {percent(m.success_rate)}") for m in minutes],
            unit_format=percent,
            peak=1.0,
        ),
        "lag": bar_chart(
            "p95 fire lag per minute",
            [
                (m.p95_lag_seconds, "chart-lag", f"{_minute_label(m.start)}: {seconds(m.p95_lag_seconds)}")
                for m in minutes
            ],
            unit_format=seconds,
        ),
        "queue": bar_chart(
            "Age of the oldest queued run, per minute",
            [
                (
                    m.oldest_queued_seconds,
                    "chart-queue",
                    f"{_minute_label(m.start)}: {seconds(m.oldest_queued_seconds)}",
                )
                for m in minutes
            ],
            unit_format=seconds,
        ),
    }
    context = {"stats": stats, "charts": charts}
    if request.htmx:
        return render(request, "dashboard/overview.html#stats", context)
    return render(request, "dashboard/overview.html", context)
