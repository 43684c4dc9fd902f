"""The bounded fault suite (issue #9): the key scenarios of bench/chaos with smaller spikes.

Each test starts its own PostgreSQL and Redis on private ports (never the machine's 5432/6379),
the real scheduler(s), Celery worker and receiver with production settings and default timings,
loads a spike, injects one fault (a Redis or PostgreSQL restart, a worker killed or stopped
gracefully, a scheduler frozen inside a transaction), waits for every run to end, and asserts
what issue #9's acceptance asks: nothing lost, no duplicate rows, nothing stuck, the auditor
clean, duplicate deliveries only where at-least-once allows them (a worker killed mid-request),
and each fault's recovery bound. The waits are cut at the bound plus slack, so a regression fails
in about a minute instead of waiting for the 300 s requeue sweep.

The full form, with bigger spikes and every scenario, is `bench/chaos/run`. To see these tests
fail on an older revision: `git archive <rev> | tar -x -C /tmp/old` and run them with
CHIME_CHAOS_CODE=/tmp/old (the processes and migrations come from there, the harness from here).
"""

import os
from pathlib import Path

import pytest

from bench.chaos.harness import Options, build_template, run_scenario
from bench.chaos.processes import ROOT
from bench.chaos.run import notes, table
from bench.chaos.scenarios import SCENARIOS, SIGSTOP_SECONDS, SIGTERM_GRACE_SECONDS
from bench.chaos.servers import make_workspace, missing_binaries, remove_workspace

pytestmark = pytest.mark.slow

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
RUNS = 800
TIMEOUT = 120  # seconds after the spike's first occurrence
LOGS = ROOT / "test-output" / "chaos"
CODE = Path(os.environ.get("CHIME_CHAOS_CODE") or ROOT)  # the Chime checkout whose processes run

BROKER_BOUND = 30  # issue #9: runs the broker held are delivered again within 30 s of its return
PG_BOUND = 60  # all delivered without waiting for the 300 s requeue sweep
SIGTERM_BOUND = 30  # handed back at once, not after the 30 s run lease
TAKEOVER_BOUND = 15  # docs/operations.md: a dead or stalled scheduler's partitions, TTL + refresh
SLACK = 10  # two busy cores shared with other work


@pytest.fixture(scope="module")
def template():
    """A migrated PostgreSQL cluster, built once; each test runs on a copy."""
    missing = missing_binaries()
    if missing:
        message = f"the fault suite needs {', '.join(missing)} (PostgreSQL 15 binaries and redis-server)"
        if IN_CI:
            pytest.fail(f"CI: {message}", pytrace=False)
        pytest.skip(f"!!! SKIPPED: {message}")
    workspace = make_workspace()
    try:
        yield build_template(workspace, LOGS, CODE)
    finally:
        remove_workspace(workspace)


def run(name: str, template, *, settle: float) -> dict:
    options = Options(runs=RUNS, timeout=TIMEOUT, settle=settle, log_dir=LOGS, code=CODE)
    result = run_scenario(SCENARIOS[name], options, template)
    print("\n" + table([result]) + "\n" + notes([result]))  # shown with -s / -rA, and on failure
    return result


def summary(result: dict) -> str:
    return f"\n{table([result])}\n{notes([result])}\nlogs: {LOGS / result['scenario']}"


def assert_survived(result: dict, *, duplicate_deliveries_allowed: bool = False) -> None:
    why = summary(result)
    assert result["open_at_fault"], f"the fault met no run in flight, so it tested nothing{why}"
    assert not result["crashed"], f"a process exited by itself: {result['crashed']}{why}"
    assert result["lost"] == 0, f"runs lost{why}"
    assert result["duplicate_rows"] == 0, f"duplicate rows {result['duplicate_rows_detail']}{why}"
    assert result["stuck"] == 0, f"runs stuck at {result['waited']} s: {result['statuses']}{why}"
    assert result["delivered"] == RUNS, why
    if not duplicate_deliveries_allowed:
        assert result["duplicate_deliveries"] == 0, f"delivered twice{why}"
    audit = result["audit"]
    assert audit["ran"], f"manage.py audit_runs did not run: {audit}"
    assert audit["violations"] == 0 and audit["exit_code"] == 0, f"audit: {audit}{why}"


def within(value, bound: float) -> bool:
    return value is not None and value <= bound


@pytest.mark.timeout(300)
def test_redis_restart_without_persistence_delivers_what_the_broker_held(template):
    result = run("redis-restart", template, settle=BROKER_BOUND + SLACK)
    assert_survived(result)
    assert within(result["all_delivered_after_recovery"], BROKER_BOUND + SLACK), summary(result)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_postgres_restart_recovers_without_the_sweep_or_resending(template, mode):
    result = run(f"pg-restart-{mode}", template, settle=PG_BOUND + SLACK)
    # No duplicate deliveries: an outcome that could not be recorded is recorded later, not re-sent.
    assert_survived(result)
    assert within(result["all_terminal_after_fault"], PG_BOUND), summary(result)
    # Nothing was charged as a lost worker: every request was either sent and recorded or not sent.
    assert result["attempts"].get("worker_lost", 0) == 0, summary(result)


@pytest.mark.timeout(300)
def test_worker_sigkill_redelivers_what_it_held_at_least_once(template):
    # Runs in flight when the worker died wait for their 30 s lease, then go again: the one place
    # where the receiver may see a webhook-id twice.
    result = run("worker-sigkill", template, settle=90)
    assert_survived(result, duplicate_deliveries_allowed=True)


@pytest.mark.timeout(300)
def test_worker_sigterm_finishes_or_hands_back_at_once(template):
    result = run("worker-sigterm", template, settle=SIGTERM_BOUND + SLACK)
    assert_survived(result)
    fault = result["fault"]
    assert fault["exited_by_itself"] and fault["shutdown_seconds"] <= SIGTERM_GRACE_SECONDS, summary(result)
    assert result["attempts"].get("worker_lost", 0) == 0, summary(result)
    assert within(result["all_terminal_after_fault"], fault["shutdown_seconds"] + SIGTERM_BOUND + SLACK), summary(
        result
    )


@pytest.mark.timeout(300)
def test_scheduler_stalled_inside_a_transaction_is_taken_over(template):
    result = run("scheduler-sigstop", template, settle=30)
    assert result["fault"]["stopped_in_transaction"], summary(result)
    assert_survived(result)
    # Taken over while it was still frozen, not when it woke up.
    assert within(result["all_delivered_after_fault"], SIGSTOP_SECONDS), summary(result)
    assert within(result["fire_lag_max"], TAKEOVER_BOUND + SLACK), summary(result)
