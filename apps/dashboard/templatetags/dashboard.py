"""Template helpers: timestamps in the viewer's zone with UTC on hover, statuses, durations."""

from datetime import UTC, datetime

from django import template
from django.utils import timezone
from django.utils.html import format_html

from apps.dashboard.describe import describe_schedule
from apps.dashboard.zones import zone_or_none

register = template.Library()

FORMAT = "%Y-%m-%d %H:%M:%S"


@register.simple_tag
def when(value: datetime | None, zone_name: str = "", empty: str = "—"):
    """<time> in the viewer's zone (or `zone_name`), the UTC value in its title and datetime."""
    if value is None:
        return empty
    zone = zone_or_none(zone_name) if zone_name else timezone.get_current_timezone()
    local = value.astimezone(zone or UTC)
    utc = value.astimezone(UTC)
    return format_html(
        '<time datetime="{}" title="{} UTC">{} {}</time>',
        utc.isoformat().replace("+00:00", "Z"),
        utc.strftime(FORMAT),
        local.strftime(FORMAT),
        local.tzname() or "",
    )


@register.simple_tag
def status_badge(status: str | None):
    if not status:
        return format_html('<span class="status status-none">{}</span>', "no runs")
    return format_html('<span class="status status-{}">{}</span>', status, status)


@register.filter
def duration(milliseconds: int | None) -> str:
    if milliseconds is None:
        return "—"
    if milliseconds < 1000:
        return f"{milliseconds} ms"
    return f"{milliseconds / 1000:.2f} s"


@register.filter
def seconds(value: float | None) -> str:
    if value is None:
        return "—"
    if value < 60:
        return f"{value:.1f} s"
    if value < 3600:
        return f"{value / 60:.1f} min"
    return f"{value / 3600:.1f} h"


@register.filter
def percent(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.1f} %"


@register.filter
def schedule_words(job) -> str:
    return describe_schedule(job)
