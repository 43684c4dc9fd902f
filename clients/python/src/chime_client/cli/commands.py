"""jobs, runs, preview, keys, secret: one function per command, output through output.emit."""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer

from chime_client.client import FINISHED

from . import app
from .output import console, emit, fields, schedule_text, status, table

JsonFlag = Annotated[bool, typer.Option("--json", help="JSON output for scripts.")]

jobs = typer.Typer(
    help="Create, inspect and control jobs.", no_args_is_help=True, epilog="Example: chimectl jobs list --json"
)
runs = typer.Typer(
    help="Inspect, replay and cancel runs.", no_args_is_help=True, epilog="Example: chimectl runs list --status failed"
)
keys = typer.Typer(help="API keys of the tenant.", no_args_is_help=True, epilog="Example: chimectl keys list")
secret = typer.Typer(
    help="The signing secret that webhooks are signed with.",
    no_args_is_help=True,
    epilog="Example: chimectl secret show",
)
app.add_typer(jobs, name="jobs")
app.add_typer(runs, name="runs")
app.add_typer(keys, name="keys")
app.add_typer(secret, name="secret")


def _state(ctx: typer.Context, as_json: bool):
    state = ctx.find_root().obj
    return state.client(), as_json or state.json


JOB_COLUMNS = [
    ("id", lambda j: j["id"]),
    ("name", lambda j: j["name"]),
    ("status", lambda j: status(j["status"])),
    ("schedule", lambda j: schedule_text(j.get("schedule"))),
    ("next fire (UTC)", lambda j: j.get("next_fire_at")),
]
RUN_COLUMNS = [
    ("id", lambda r: r["id"]),
    ("status", lambda r: status(r["status"])),
    ("trigger", lambda r: r["trigger"]),
    ("scheduled for", lambda r: r["scheduled_for"]),
    ("attempts", lambda r: r["attempt_count"]),
    ("finished", lambda r: r.get("finished_at")),
]
JOB_FIELDS = ["id", "name", "status", "status_reason", "schedule", "target", "priority", "retry", "next_fire_at"]
RUN_FIELDS = ["id", "job_id", "status", "status_reason", "trigger", "scheduled_for", "attempt_count", "finished_at"]


def _limit(items, limit: int | None):
    out = []
    for item in items:
        if limit is not None and len(out) >= limit:
            break
        out.append(item)
    return out


def _show_job(job):
    console.print(fields(job, JOB_FIELDS))
    if job.get("recent_runs"):
        console.print(table(job["recent_runs"], RUN_COLUMNS, title="recent runs"))


def _show_run(run):
    console.print(fields(run, RUN_FIELDS))
    attempts = run.get("attempts") or []
    if attempts:
        columns = [
            ("#", lambda a: a["number"]),
            ("started", lambda a: a["started_at"]),
            ("status code", lambda a: a.get("status_code")),
            ("error", lambda a: a.get("error_kind") or ""),
            ("ms", lambda a: a.get("duration_ms")),
        ]
        console.print(table(attempts, columns, title="attempts"))


@jobs.command("list", epilog="Example: chimectl jobs list --status paused --limit 20")
def jobs_list(
    ctx: typer.Context,
    status_filter: Annotated[str | None, typer.Option("--status", help="active, paused or completed")] = None,
    priority: Annotated[str | None, typer.Option(help="high, default or low")] = None,
    query: Annotated[str | None, typer.Option("--q", help="name contains")] = None,
    limit: Annotated[int | None, typer.Option(help="at most this many")] = None,
    as_json: JsonFlag = False,
):
    """List jobs, newest first."""
    client, as_json = _state(ctx, as_json)
    found = _limit(client.jobs.list(status=status_filter, priority=priority, q=query), limit)
    emit(as_json, found, lambda rows: console.print(table(rows, JOB_COLUMNS)))


@jobs.command("get", epilog="Example: chimectl jobs get 01a2...")
def jobs_get(ctx: typer.Context, job_id: str, as_json: JsonFlag = False):
    """Show a job with its recent runs."""
    client, as_json = _state(ctx, as_json)
    emit(as_json, client.jobs.get(job_id), _show_job)


def _job_fields(cron, tz, once, run_at, url, method, header, body, priority, extra) -> dict:
    changes: dict = {}
    if cron is not None:
        changes["schedule"] = {"type": "cron", "expression": cron, "timezone": tz or "UTC"}
    elif once or run_at is not None:
        changes["schedule"] = {"type": "once", **({"run_at": run_at} if run_at else {})}
    if url is not None:
        target: dict = {"url": url, "method": method or "POST"}
        if header:
            target["headers"] = dict(h.split("=", 1) for h in header)
        if body is not None:
            target["body"] = json.loads(body)
        changes["target"] = target
    if priority is not None:
        changes["priority"] = priority
    for item in extra or []:
        key, _, value = item.partition("=")
        changes[key] = json.loads(value)
    return changes


Cron = Annotated[str | None, typer.Option(help='cron expression, e.g. "30 2 * * *"')]
Tz = Annotated[str | None, typer.Option("--tz", help="time zone of the cron expression (UTC)")]
Once = Annotated[bool, typer.Option(help="fire once (at --run-at, or now)")]
RunAt = Annotated[str | None, typer.Option(help="ISO 8601 time with an offset, for --once")]
Url = Annotated[str | None, typer.Option(help="the endpoint to call")]
Method = Annotated[str | None, typer.Option(help="POST (default), PUT, PATCH, DELETE, GET")]
Header = Annotated[list[str] | None, typer.Option(help="NAME=VALUE, repeatable")]
Body = Annotated[str | None, typer.Option(help="JSON body to send")]
Priority = Annotated[str | None, typer.Option(help="high, default or low")]
Set = Annotated[list[str] | None, typer.Option("--set", help="any other field as KEY=JSON, e.g. retry='{...}'")]


@jobs.command(
    "create",
    epilog='Example: chimectl jobs create --name nightly --cron "0 2 * * *" --tz Europe/Berlin --url https://example.com/hook',
)
def jobs_create(
    ctx: typer.Context,
    name: Annotated[str, typer.Option(help="the job's name")],
    url: Annotated[str, typer.Option(help="the endpoint to call")],
    cron: Cron = None,
    tz: Tz = None,
    once: Once = False,
    run_at: RunAt = None,
    method: Method = None,
    header: Header = None,
    body: Body = None,
    priority: Priority = None,
    extra: Set = None,
    idempotency_key: Annotated[str | None, typer.Option(help="send this Idempotency-Key")] = None,
    as_json: JsonFlag = False,
):
    """Create a job (a cron schedule with --cron, or --once)."""
    client, as_json = _state(ctx, as_json)
    if cron is None and not once and run_at is None:
        raise typer.BadParameter("give --cron EXPRESSION or --once")
    job_fields = _job_fields(cron, tz, once, run_at, url, method, header, body, priority, extra)
    job = client.jobs.create(name=name, idempotency_key=idempotency_key, **job_fields)
    emit(as_json, job, _show_job)


@jobs.command("update", epilog='Example: chimectl jobs update 01a2... --cron "15 3 * * *" --tz UTC')
def jobs_update(
    ctx: typer.Context,
    job_id: str,
    name: Annotated[str | None, typer.Option(help="a new name")] = None,
    cron: Cron = None,
    tz: Tz = None,
    once: Once = False,
    run_at: RunAt = None,
    url: Url = None,
    method: Method = None,
    header: Header = None,
    body: Body = None,
    priority: Priority = None,
    extra: Set = None,
    as_json: JsonFlag = False,
):
    """Change what is given; the rest keeps its value (a schedule or target is replaced whole)."""
    client, as_json = _state(ctx, as_json)
    changes = _job_fields(cron, tz, once, run_at, url, method, header, body, priority, extra)
    if name is not None:
        changes["name"] = name
    if not changes:
        raise typer.BadParameter("nothing to change")
    emit(as_json, client.jobs.update(job_id, **changes), _show_job)


def _simple(command: str, doc: str, call):
    @jobs.command(command, epilog=f"Example: chimectl jobs {command} 01a2...", help=doc)
    def _command(ctx: typer.Context, job_id: str, as_json: JsonFlag = False):
        client, as_json = _state(ctx, as_json)
        answer = call(client, job_id)
        if answer is None:
            emit(as_json, {"id": job_id, command: True}, lambda _: console.print(f"{command}: [bold]{job_id}[/bold]"))
        elif "job_id" in answer:
            emit(as_json, answer, _show_run)
        else:
            emit(as_json, answer, _show_job)


_simple("pause", "Pause a job.", lambda c, i: c.jobs.pause(i))
_simple("resume", "Resume a job (missed occurrences follow its misfire policy).", lambda c, i: c.jobs.resume(i))
_simple("trigger", "Fire a job now (a manual run).", lambda c, i: c.jobs.trigger(i))
_simple("delete", "Delete a job for good (its history stays).", lambda c, i: c.jobs.delete(i))


@jobs.command(
    "backfill", epilog="Example: chimectl jobs backfill 01a2... --start 2026-11-01T00:00Z --end 2026-11-02T00:00Z"
)
def jobs_backfill(
    ctx: typer.Context,
    job_id: str,
    start: Annotated[str, typer.Option(help="ISO 8601, exclusive")],
    end: Annotated[str, typer.Option(help="ISO 8601, inclusive, in the past")],
    as_json: JsonFlag = False,
):
    """A run for every occurrence in (start, end]."""
    client, as_json = _state(ctx, as_json)
    result = client.jobs.backfill(job_id, start=start, end=end)

    def show(data):
        console.print(f"created {data['created']}, existing {data['existing']}")
        console.print(table(data["runs"], RUN_COLUMNS))

    emit(as_json, result, show)


@runs.command("list", epilog="Example: chimectl runs list --status failed --job 01a2...")
def runs_list(
    ctx: typer.Context,
    job: Annotated[str | None, typer.Option(help="runs of this job")] = None,
    status_filter: Annotated[str | None, typer.Option("--status", help="e.g. failed (the dead letters)")] = None,
    limit: Annotated[int | None, typer.Option(help="at most this many")] = 50,
    as_json: JsonFlag = False,
):
    """List runs, newest first."""
    client, as_json = _state(ctx, as_json)
    found = _limit(client.runs.list(job=job, status=status_filter), limit)
    emit(as_json, found, lambda rows: console.print(table(rows, RUN_COLUMNS)))


@runs.command("get", epilog="Example: chimectl runs get 01a2... --watch")
def runs_get(
    ctx: typer.Context,
    run_id: str,
    watch: Annotated[bool, typer.Option(help="follow the run until it ends")] = False,
    interval: Annotated[float, typer.Option(help="seconds between polls with --watch")] = 1.0,
    as_json: JsonFlag = False,
):
    """Show a run with its attempts; --watch follows it live until it ends."""
    client, as_json = _state(ctx, as_json)
    run = client.runs.get(run_id)
    if watch:
        seen = None
        while True:
            state = (run["status"], run["attempt_count"])
            if state != seen and not as_json:
                console.print(f"{time.strftime('%H:%M:%S')} {status(run['status'])} attempts={run['attempt_count']}")
            seen = state
            if run["status"] in FINISHED:
                break
            time.sleep(interval)
            run = client.runs.get(run_id)
    emit(as_json, run, _show_run)


@runs.command("replay", epilog="Example: chimectl runs replay 01a2...")
def runs_replay(ctx: typer.Context, run_id: str, as_json: JsonFlag = False):
    """Replay a failed run (same webhook-id, a fresh retry budget)."""
    client, as_json = _state(ctx, as_json)
    emit(as_json, client.runs.replay(run_id), _show_run)


@runs.command("cancel", epilog="Example: chimectl runs cancel 01a2...")
def runs_cancel(ctx: typer.Context, run_id: str, as_json: JsonFlag = False):
    """Cancel a run that has not finished."""
    client, as_json = _state(ctx, as_json)
    emit(as_json, client.runs.cancel(run_id), _show_run)


@app.command("preview", epilog='Example: chimectl preview "30 2 * * *" --tz Europe/Berlin --start 2026-03-28T00:00:00Z')
def preview(
    ctx: typer.Context,
    expression: str,
    tz: Annotated[str, typer.Option("--tz", help="time zone")] = "UTC",
    count: Annotated[int, typer.Option(help="how many fire times")] = 10,
    start: Annotated[str | None, typer.Option(help="from this time (ISO 8601; default now)")] = None,
    as_json: JsonFlag = False,
):
    """The next fire times of a cron expression, DST gaps and overlaps flagged."""
    client, as_json = _state(ctx, as_json)
    result = client.schedules.preview(expression, timezone=tz, count=count, start=start)
    flags = {"gap": "[yellow]DST gap[/yellow]", "overlap": "[yellow]DST overlap[/yellow]"}
    columns = [("UTC", lambda t: t["utc"]), ("local", lambda t: t["local"]), ("DST", lambda t: flags.get(t["dst"], ""))]
    emit(as_json, result, lambda data: console.print(table(data["fire_times"], columns, title=f"{expression} ({tz})")))


KEY_COLUMNS = [
    ("id", lambda k: k["id"]),
    ("name", lambda k: k["name"]),
    ("prefix", lambda k: k["prefix"]),
    ("created", lambda k: k["created_at"]),
    ("last used", lambda k: k.get("last_used_at")),
    ("revoked", lambda k: k.get("revoked_at")),
]


@keys.command("list", epilog="Example: chimectl keys list")
def keys_list(ctx: typer.Context, as_json: JsonFlag = False):
    """List API keys, newest first."""
    client, as_json = _state(ctx, as_json)
    emit(as_json, list(client.api_keys.list()), lambda rows: console.print(table(rows, KEY_COLUMNS)))


@keys.command("create", epilog="Example: chimectl keys create --name ci")
def keys_create(ctx: typer.Context, name: Annotated[str, typer.Option(help="a label")] = "", as_json: JsonFlag = False):
    """A new API key: its raw value is shown this once."""
    client, as_json = _state(ctx, as_json)
    created = client.api_keys.create(name)
    emit(
        as_json, created, lambda k: console.print(f"[bold]{k['key']}[/bold]\n(shown once: store it now; id {k['id']})")
    )


@keys.command("revoke", epilog="Example: chimectl keys revoke 01a2...")
def keys_revoke(ctx: typer.Context, key_id: str, as_json: JsonFlag = False):
    """Revoke an API key (refused from its next request on)."""
    client, as_json = _state(ctx, as_json)
    client.api_keys.revoke(key_id)
    emit(as_json, {"id": key_id, "revoked": True}, lambda _: console.print(f"revoked [bold]{key_id}[/bold]"))


@secret.command("show", epilog="Example: chimectl secret show")
def secret_show(ctx: typer.Context, as_json: JsonFlag = False):
    """The current signing secret (whsec_...)."""
    client, as_json = _state(ctx, as_json)
    emit(as_json, client.signing_secret.get(), lambda s: console.print(s["secret"]))


@secret.command("rotate", epilog="Example: chimectl secret rotate")
def secret_rotate(ctx: typer.Context, as_json: JsonFlag = False):
    """A new signing secret; the old one stays valid for 24 hours (both signatures are sent)."""
    client, as_json = _state(ctx, as_json)
    emit(as_json, client.signing_secret.rotate(), lambda s: console.print(f"{s['secret']}\n(the old one works 24 h)"))
