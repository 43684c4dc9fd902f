"""The run's state machine (apps/jobs/transitions.py), on real PostgreSQL: every event applied to
a run in every state moves exactly the runs the table allows; nothing outside the module writes
`JobRun.status` (a scan of apps/, checked against planted violations first); the table in
docs/architecture.md is the table in the code."""

import ast
import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.db.models import F
from django.utils import timezone

from apps.jobs import transitions
from apps.jobs.models import JobRun, RunStatus
from apps.jobs.transitions import TRANSITIONS, Event, move, release_fenced
from apps.scheduler.models import SchedulerLease
from tests.factories import JobFactory

ROOT = Path(__file__).resolve().parents[2]
STATES = list(RunStatus.values)


def a_run(job, state: str, *, minutes_ago: int = 0) -> JobRun:
    at = timezone.now() - timedelta(minutes=minutes_ago)
    return JobRun.objects.create(
        tenant=job.tenant,
        definition=job,
        partition=job.partition,
        scheduled_for=at,
        available_at=at,
        status=state,
        status_reason="before",
    )


def one_run_per_state(job) -> dict[str, JobRun]:
    return {state: a_run(job, state, minutes_ago=i) for i, state in enumerate(STATES)}


def states_of(runs: dict[str, JobRun]) -> dict[str, str]:
    by_id = dict(JobRun.objects.filter(id__in=[r.id for r in runs.values()]).values_list("id", "status"))
    return {state: by_id[run.id] for state, run in runs.items()}


@pytest.mark.django_db
@pytest.mark.parametrize("event", list(Event))
def test_each_event_moves_exactly_the_runs_in_its_source_states(tenant, event):
    """8 states x every event: a run in a source state moves to the target and is counted; a run
    in any other state (every forbidden (from, to) of this event) is untouched and not counted."""
    transition = TRANSITIONS[event]
    runs = one_run_per_state(JobFactory(tenant=tenant))
    moved = move(event, [run.id for run in runs.values()], status_reason="after")
    assert moved == len(transition.sources)
    after = states_of(runs)
    for state in STATES:
        expected = transition.target if state in transition.sources else state
        assert after[state] == expected, f"{event}: {state} became {after[state]}"
    # The fields go with the status, to the moved runs only.
    assert set(JobRun.objects.filter(status_reason="after").values_list("id", flat=True)) == {
        runs[state].id for state in transition.sources
    }


@pytest.mark.django_db
@pytest.mark.parametrize("source", STATES)
@pytest.mark.parametrize("target", STATES)
def test_every_pair_is_reachable_only_through_the_table(tenant, source, target):
    """The 64 (from, to) pairs: an allowed pair moves through each event that allows it; for a
    forbidden pair, no event that enters `target` moves a run out of `source`."""
    job = JobFactory(tenant=tenant)
    entering = [t for t in TRANSITIONS.values() if t.target == target]
    allowed = (source, target) in transitions.allowed_pairs()
    assert allowed == any(source in t.sources for t in entering)
    for i, transition in enumerate(entering):
        run = a_run(job, source, minutes_ago=i)
        moved = move(transition.event, [run.id])
        run.refresh_from_db()
        if source in transition.sources:
            assert (moved, run.status) == (1, target), transition.event
        else:
            assert (moved, run.status) == (0, source), transition.event


def test_the_allowed_pairs_are_the_ones_the_code_used_to_write():
    """Derived from every status write before this module (scheduler, delivery, jobs services)."""
    s = RunStatus
    assert transitions.allowed_pairs() == {
        (s.SCHEDULED, s.QUEUED), (s.RETRYING, s.QUEUED), (s.QUEUED, s.SCHEDULED), (s.QUEUED, s.RUNNING),
        (s.QUEUED, s.SKIPPED), (s.RUNNING, s.QUEUED), (s.RUNNING, s.SUCCEEDED), (s.RUNNING, s.RETRYING),
        (s.RUNNING, s.FAILED), (s.RUNNING, s.CANCELLED), (s.RETRYING, s.CANCELLED), (s.SCHEDULED, s.CANCELLED),
        (s.QUEUED, s.CANCELLED), (s.FAILED, s.SCHEDULED),
    }  # fmt: skip
    terminal = {s.SUCCEEDED, s.CANCELLED, s.SKIPPED}
    assert not any(source in terminal for source, _ in transitions.allowed_pairs())  # only `failed` is replayable


@pytest.mark.django_db
def test_where_narrows_and_fields_are_set_with_the_status(tenant):
    runs = one_run_per_state(JobFactory(tenant=tenant))
    running = runs[RunStatus.RUNNING]
    JobRun.objects.filter(id=running.id).update(lease_owner="me", attempt_count=3)
    assert move(Event.HAND_BACK, [running.id], where={"lease_owner": "other"}) == 0
    moved = move(Event.HAND_BACK, [running.id], where={"lease_owner": "me"}, attempt_count=F("attempt_count") - 1)
    running.refresh_from_db()
    assert (moved, running.status, running.attempt_count) == (1, RunStatus.QUEUED, 2)
    # A queryset works as well as ids, and keeps its own filters.
    assert move(Event.CANCEL, JobRun.objects.filter(id=runs[RunStatus.QUEUED].id)) == 1
    assert states_of(runs)[RunStatus.SCHEDULED] == RunStatus.SCHEDULED


@pytest.mark.django_db
@pytest.mark.parametrize("epoch_held", [1, 2])
def test_the_fenced_release_moves_only_releasable_runs_under_the_lease(tenant, epoch_held):
    job = JobFactory(tenant=tenant)
    runs = one_run_per_state(job)
    now = timezone.now()
    SchedulerLease.objects.update_or_create(
        partition=job.partition, defaults={"owner": "s1", "epoch": 1, "expires_at": now + timedelta(minutes=1)}
    )
    rows = release_fenced(
        [run.id for run in runs.values()], now=now, partitions=[job.partition], epochs=[epoch_held], owner="s1"
    )
    after = states_of(runs)
    if epoch_held != 1:  # another scheduler took the partition since: nothing is released
        assert rows == []
        assert after == {state: state for state in STATES}
        return
    releasable = TRANSITIONS[Event.RELEASE].sources
    assert sorted(rows) == sorted((str(runs[state].id), job.priority, str(tenant.id)) for state in releasable)
    assert after == {state: (RunStatus.QUEUED if state in releasable else state) for state in STATES}


# -- nobody else writes the status ----------------------------------------------------------------

RUN_STATES = set(RunStatus.values)
SQL_UPDATE_RUNS = re.compile(r"UPDATE\s+jobs_jobrun\b(?P<rest>.*?)(?:\bWHERE\b|\bRETURNING\b|;|\Z)", re.I | re.S)


def _mentions_run_status(node: ast.AST) -> bool:
    return any(
        (isinstance(n, ast.Name) and n.id == "RunStatus")
        or (isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in RUN_STATES)
        for n in ast.walk(node)
    )


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, ast.Attribute | ast.Call | ast.Subscript):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _status_dicts(scope: ast.AST) -> dict[str, ast.AST]:
    """Names bound to a dict literal with a "status" key, in this scope: name -> the value."""
    names = {}
    for node in ast.walk(scope):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
            value = _status_value(node.value)
            if value is not None:
                names |= {t.id: value for t in node.targets if isinstance(t, ast.Name)}
    return names


def _status_value(d: ast.Dict) -> ast.AST | None:
    return next(
        (v for k, v in zip(d.keys, d.values, strict=True) if isinstance(k, ast.Constant) and k.value == "status"), None
    )


def _is_job_status(value: ast.AST, receiver: ast.AST) -> bool:
    """JobDefinition is the only other model with a `status`: its writes are not the run's."""
    if _mentions_run_status(value):
        return False
    return _root_name(receiver) == "JobDefinition" or any(
        isinstance(n, ast.Name) and n.id == "JobStatus" for n in ast.walk(value)
    )


def status_writes(source: str, name: str = "<sample>") -> list[str]:
    """Every statement of `source` that writes JobRun.status: `.update(status=...)` (also through
    `**dict`) unless it is plainly a JobDefinition's, `bulk_update(..., ["status"])`,
    `x.status = RunStatus.X` in a function that saves, and SQL `UPDATE jobs_jobrun SET status`."""
    tree = ast.parse(source)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            for match in SQL_UPDATE_RUNS.finditer(node.value):
                if re.search(r"\bSET\b.*\bstatus\s*=", match.group("rest"), re.I | re.S):
                    found.append(f"{name}:{node.lineno}: SQL sets jobs_jobrun.status")
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Module):
            continue
        dicts = _status_dicts(node)
        saves, assigns = False, []
        for n in ast.walk(node):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
                attr = n.func.attr
                if attr == "save":
                    saves = True
                if attr == "update":
                    for kw in n.keywords:
                        value = kw.value if kw.arg == "status" else None
                        if kw.arg is None and isinstance(kw.value, ast.Name):
                            value = dicts.get(kw.value.id)
                        if kw.arg is None and isinstance(kw.value, ast.Dict):
                            value = _status_value(kw.value)
                        if value is not None and not _is_job_status(value, n.func.value):
                            found.append(f"{name}:{n.lineno}: .update() sets the run status")
                if attr == "bulk_update" and any(
                    isinstance(c, ast.Constant) and c.value == "status" for a in n.args[1:2] for c in ast.walk(a)
                ):
                    found.append(f"{name}:{n.lineno}: bulk_update of status")
            if isinstance(n, ast.Assign | ast.AugAssign | ast.AnnAssign) and n.value and _mentions_run_status(n.value):
                targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                for target in targets:
                    elements = target.elts if isinstance(target, ast.Tuple) else [target]
                    if any(isinstance(e, ast.Attribute) and e.attr == "status" for e in elements):
                        assigns.append(n.lineno)
        if saves and not isinstance(node, ast.Module):
            found += [f"{name}:{line}: run.status assigned, then saved" for line in assigns]
    return sorted(set(found))


PLANTED = {
    "orm update": "JobRun.objects.filter(id=1).update(status=RunStatus.FAILED)",
    "orm update, other model name": "runs.filter(id=1).update(status=RunStatus.CANCELLED, finished_at=now)",
    "orm update, string state": "qs.update(status='queued')",
    "orm update on JobRun, variable": "JobRun.objects.filter(id=1).update(status=new)",
    "orm update of some queryset, variable": "runs.update(status=new, finished_at=now)",
    "update through a dict of variables": "def f(qs, s):\n    changes = {'status': s}\n    qs.update(**changes)",
    "update through a dict": (
        "def f(run):\n    changes = {'status': RunStatus.RETRYING}\n"
        "    JobRun.objects.filter(id=run.id).update(lease_owner='', **changes)"
    ),
    "update through an inline dict": "qs.update(**{'status': RunStatus.FAILED})",
    "assign and save": "def f(run):\n    run.status = RunStatus.CANCELLED\n    run.save(update_fields=['status'])",
    "tuple assign and save": "def f(run):\n    run.status, run.x = RunStatus.SCHEDULED, 1\n    run.save()",
    "bulk_update": "JobRun.objects.bulk_update(runs, ['status'])",
    "raw SQL": 'SQL = """\nUPDATE jobs_jobrun AS r\n   SET queued_at = now(), status = \'queued\'\n WHERE id = 1"""',
    "raw SQL, one line": "cursor.execute(\"UPDATE jobs_jobrun SET status = 'failed' WHERE id = %s\", [1])",
}
BENIGN = {
    "job status": "JobDefinition.objects.filter(id=1).update(status=JobStatus.PAUSED)",
    "job status, variable": "JobDefinition.objects.filter(id=d).update(next_fire_at=n, status=status)",
    "job saved": "def f(job):\n    job.status = JobStatus.PAUSED\n    job.save()",
    "a read": "JobRun.objects.filter(status=RunStatus.QUEUED).update(queued_at=now)",
    "in memory only": "def f(run):\n    run.status = RunStatus.RUNNING\n    return run",
    "job SQL": 'X = "UPDATE jobs_jobdefinition SET status = u.status FROM unnest(%s) AS u WHERE id = u.id"',
    "run SQL, no status": "X = \"UPDATE jobs_jobrun SET queued_at = %s WHERE status = 'queued'\"",
    "insert": "X = 'INSERT INTO jobs_jobrun (id, status) VALUES (%s, %s)'",
}


@pytest.mark.parametrize("sample", list(PLANTED))
def test_the_scan_catches_a_planted_status_write(sample):
    assert status_writes(PLANTED[sample]), sample


@pytest.mark.parametrize("sample", list(BENIGN))
def test_the_scan_leaves_other_writes_alone(sample):
    assert status_writes(BENIGN[sample]) == [], sample


def test_only_transitions_py_writes_the_run_status():
    offenders = []
    for path in sorted((ROOT / "apps").rglob("*.py")):
        relative = path.relative_to(ROOT)
        if "migrations" in relative.parts or relative == Path("apps/jobs/transitions.py"):
            continue
        offenders += status_writes(path.read_text(), str(relative))
    assert offenders == [], "write JobRun.status through apps/jobs/transitions.py:\n" + "\n".join(offenders)


def test_the_scan_sees_the_writes_in_transitions_py():
    """The module itself does write the status: were the scan blind, the test above would pass."""
    assert status_writes((ROOT / "apps/jobs/transitions.py").read_text())


# -- the documented table -------------------------------------------------------------------------


def table_markdown() -> str:
    lines = ["| event | from | to | who, when |", "|---|---|---|---|"]
    for t in TRANSITIONS.values():
        sources = ", ".join(f"`{s}`" for s in t.sources)
        lines.append(f"| `{t.event}` | {sources} | `{t.target}` | {t.why} |")
    return "\n".join(lines)


def matrix_markdown() -> str:
    lines = ["| from \\ to | " + " | ".join(f"`{s}`" for s in STATES) + " |", "|---" * (len(STATES) + 1) + "|"]
    for source in STATES:
        cells = [
            ", ".join(t.event for t in TRANSITIONS.values() if t.target == target and source in t.sources) or "·"
            for target in STATES
        ]
        lines.append(f"| `{source}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def test_the_doc_shows_the_table_of_the_code():
    doc = (ROOT / "docs/architecture.md").read_text()
    assert table_markdown() in doc, "docs/architecture.md#the-runs-state-machine, the table:\n" + table_markdown()
    assert matrix_markdown() in doc, "docs/architecture.md#the-runs-state-machine, the matrix:\n" + matrix_markdown()
    born = ", ".join(f"`{s}`" for s in transitions.BIRTH_STATES)
    assert f"born {born}" in doc
