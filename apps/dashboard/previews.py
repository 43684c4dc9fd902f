"""The job form's live preview: the next fire times of a schedule, with DST effects spelled out."""

from dataclasses import dataclass, field
from datetime import datetime, tzinfo

from apps.jobs.models import DstGap, DstOverlap
from apps.jobs.schedules import CronSchedule, DstPolicy, ScheduleError

PREVIEW_COUNT = 5
DST_NOTES = {
    "gap": "DST gap: this wall time does not exist that day; shifted to the first instant after the gap",
    "overlap": "DST overlap: this wall time happens twice that day",
}


@dataclass(frozen=True)
class PreviewTime:
    utc: datetime
    local: datetime  # in the job's zone
    viewer: datetime  # in the viewer's zone
    dst: str | None
    dst_note: str


@dataclass
class Preview:
    expression: str = ""
    timezone: str = ""
    error: str = ""
    error_field: str = ""  # "expression" or "timezone": the field the error belongs next to
    times: list[PreviewTime] = field(default_factory=list)
    fixed_time: bool = False


def schedule_preview(params, *, now: datetime, viewer_zone: tzinfo) -> Preview:
    """Preview from form-like params (cron_expression, timezone, dst_gap, dst_overlap)."""
    expression = (params.get("cron_expression") or "").strip()
    zone_name = (params.get("timezone") or "UTC").strip()
    preview = Preview(expression=expression, timezone=zone_name)
    if not expression:
        return preview
    gap = params.get("dst_gap") if params.get("dst_gap") in DstGap.values else DstGap.SHIFT
    overlap = params.get("dst_overlap") if params.get("dst_overlap") in DstOverlap.values else DstOverlap.FIRST
    try:
        schedule = CronSchedule.parse(expression, zone_name, DstPolicy(gap, overlap))
        fire_times = schedule.preview(now, PREVIEW_COUNT)
    except ScheduleError as error:
        preview.error, preview.error_field = error.message, error.field
        return preview
    preview.expression, preview.fixed_time = schedule.expression, schedule.is_fixed_time
    preview.times = [
        PreviewTime(
            utc=fire.utc,
            local=fire.local,
            viewer=fire.utc.astimezone(viewer_zone),
            dst=fire.dst,
            dst_note=DST_NOTES.get(fire.dst, ""),
        )
        for fire in fire_times
    ]
    return preview
