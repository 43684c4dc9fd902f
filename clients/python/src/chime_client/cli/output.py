"""Human output (rich tables, colours) or ``--json`` (the API's own objects, for scripts)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from rich.console import Console
from rich.table import Table

console = Console()
errors = Console(stderr=True)

STATUS_COLOURS = {
    "succeeded": "green",
    "active": "green",
    "failed": "red",
    "paused": "yellow",
    "retrying": "yellow",
    "running": "cyan",
    "queued": "cyan",
    "scheduled": "blue",
    "cancelled": "dim",
    "skipped": "dim",
    "completed": "dim",
}


def status(value: str | None) -> str:
    if not value:
        return ""
    colour = STATUS_COLOURS.get(value)
    return f"[{colour}]{value}[/{colour}]" if colour else value


def emit(as_json: bool, data: Any, render: Callable[[Any], None]) -> None:
    if as_json:
        print(json.dumps(data, indent=2, default=str))
    else:
        render(data)


def table(rows: Iterable[dict], columns: list[tuple[str, Callable[[dict], Any]]], title: str | None = None) -> Table:
    grid = Table(title=title, header_style="bold")
    for name, _ in columns:
        grid.add_column(name)
    for row in rows:
        grid.add_row(*("" if (value := get(row)) is None else str(value) for _, get in columns))
    return grid


def fields(data: dict, keys: list[str], title: str | None = None) -> Table:
    grid = Table(title=title, show_header=False, box=None)
    grid.add_column(style="bold")
    grid.add_column()
    for key in keys:
        value = data.get(key)
        if key == "status":
            value = status(value)
        elif isinstance(value, dict | list):
            value = json.dumps(value)
        grid.add_row(key, "" if value is None else str(value))
    return grid


def schedule_text(schedule: dict | None) -> str:
    if not schedule:
        return ""
    if schedule.get("type") == "cron":
        return f"{schedule.get('expression')} ({schedule.get('timezone')})"
    return f"once at {schedule.get('run_at')}"
