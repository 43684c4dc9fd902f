"""Small bar charts as plain data for server-side SVG (templates/dashboard/includes/bar_chart.html).

No JavaScript, readable without it: every bar carries a <title> (its exact value), and every
chart has a text summary next to it.
"""

from dataclasses import dataclass

WIDTH, HEIGHT = 300, 60
GAP = 1.0


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    css: str  # colour class, e.g. "status-succeeded"
    title: str


@dataclass(frozen=True)
class Chart:
    label: str  # the accessible name: what the chart shows
    bars: list[Bar]
    peak: str  # the value the top of the chart stands for, as text
    width: int = WIDTH
    height: int = HEIGHT


def bar_chart(label: str, points: list[tuple[float | None, str, str]], unit_format=str, peak=None) -> Chart:
    """`points`: (value or None, css class, title) left to right; None draws nothing. The chart's
    top stands for `peak` (default: the largest value)."""
    peak = peak or max((value for value, _, _ in points if value is not None), default=0) or 1
    slot = WIDTH / max(len(points), 1)
    bars = []
    for i, (value, css, title) in enumerate(points):
        if value is None:
            continue
        height = max(HEIGHT * value / peak, 1.0 if value > 0 else 0.0)
        bars.append(
            Bar(
                x=round(i * slot, 2),
                y=round(HEIGHT - height, 2),
                width=round(max(slot - GAP, 0.5), 2),
                height=round(height, 2),
                css=css,
                title=title,
            )
        )
    return Chart(label=label, bars=bars, peak=unit_format(peak))


def stacked_counts(label: str, minutes, fmt_minute) -> Chart:
    """Succeeded runs per minute, with failed runs drawn on top of them."""
    peak = max((m.finished for m in minutes), default=0) or 1
    slot = WIDTH / max(len(minutes), 1)
    bars = []
    for i, minute in enumerate(minutes):
        base = HEIGHT
        when = fmt_minute(minute.start)
        for count, css, word in (
            (minute.succeeded, "bar-succeeded", "succeeded"),
            (minute.failed, "bar-failed", "failed"),
        ):
            if not count:
                continue
            height = max(HEIGHT * count / peak, 1.0)
            bars.append(
                Bar(
                    x=round(i * slot, 2),
                    y=round(base - height, 2),
                    width=round(max(slot - GAP, 0.5), 2),
                    height=round(height, 2),
                    css=css,
                    title=f"{when}: {count} {word}",
                )
            )
            base -= height
    return Chart(label=label, bars=bars, peak=str(peak))


def run_durations(label: str, runs, fmt_time) -> Chart:
    """One bar per run, oldest on the left: height is the last attempt's latency, colour the
    outcome. Runs without an attempt (scheduled, skipped, ...) get a thin bar in their colour."""
    runs = list(reversed(runs))
    peak = max((run.last_duration_ms or 0 for run in runs), default=0) or 1
    slot = WIDTH / max(len(runs), 1)
    bars = []
    for i, run in enumerate(runs):
        ms = run.last_duration_ms
        height = max(HEIGHT * ms / peak, 2.0) if ms else 2.0
        latency = f", {ms} ms" if ms is not None else ""
        bars.append(
            Bar(
                x=round(i * slot, 2),
                y=round(HEIGHT - height, 2),
                width=round(max(slot - GAP, 0.5), 2),
                height=round(height, 2),
                css=f"bar-{run.status}",
                title=f"{fmt_time(run.scheduled_for)}: {run.status}{latency}",
            )
        )
    return Chart(label=label, bars=bars, peak=f"{peak} ms")
