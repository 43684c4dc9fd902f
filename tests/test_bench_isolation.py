"""The isolation bench (bench/isolation, issue #10) in its tiny form: it runs end to end on real
processes and produces a complete report. No speed is asserted here: the goals (realistic runs/s
at least half the instant runs/s, the other tenant's p99 fire lag beside a slow tenant under 3 s)
are measured by `python -m bench.isolation` and recorded in docs/benchmarks.md.

It starts its own PostgreSQL and Redis on private ports (never the machine's 5432 / 6379), the
bench receiver and this tree's Procfile scheduler and worker with production settings.
"""

import os

import pytest

from bench.chaos.processes import ROOT
from bench.chaos.servers import missing_binaries
from bench.isolation.harness import TINY, run
from bench.isolation.report import markdown, summarize

pytestmark = pytest.mark.slow

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
LOGS = ROOT / "test-output" / "isolation"


@pytest.fixture(scope="module")
def report():
    missing = missing_binaries()
    if missing:
        message = f"the isolation bench needs {', '.join(missing)} (PostgreSQL 15 binaries and redis-server)"
        if IN_CI:
            pytest.fail(f"CI: {message}", pytrace=False)
        pytest.skip(f"!!! SKIPPED: {message}")
    result = run(TINY, code=ROOT, log_dir=LOGS, log=lambda message: None)
    summary = summarize(result)
    text = markdown(result, summary, "pytest tests/test_bench_isolation.py")
    print("\n" + text)  # shown with -s / -rA, and on failure
    return result, summary, text


@pytest.mark.timeout(180)
def test_every_phase_ends_with_every_run_terminal_and_no_crash(report):
    result, _summary, text = report
    assert not result["crashed"], f"{result['crashed']}\nlogs: {LOGS}"
    for raw in result["rounds"]:
        for phase in ("instant", "realistic", "alone", "beside-slow"):
            p = raw[phase]
            assert p["complete"], f"{phase}: not every run terminal after {p['waited']} s\n{text}\nlogs: {LOGS}"
            assert len(p["rows"]) == p["expected"], f"{phase}: {len(p['rows'])} of {p['expected']} materialized"
    assert "Incomplete" not in text


@pytest.mark.timeout(180)
def test_report_has_every_number_of_the_acceptance(report):
    _result, summary, text = report
    (r,) = summary["rounds"]
    assert r["raw"] > 0
    for name in ("instant", "realistic"):
        assert r[name]["rate"] > 0 and r[name]["per_process"] > 0, r[name]
        assert r[name]["all_recorded"] is not None
    assert r["ratio"] > 0 and r["instant_vs_raw"] > 0
    # The other tenant's runs were all delivered and timed, alone and beside the slow tenant.
    for name in ("alone", "beside"):
        assert r[name]["delivered"] == r[name]["runs"] == TINY.other_runs, r[name]
        assert r[name]["p50"] is not None and r[name]["p99"] is not None
    # The slow tenant's requests really were held: none finished before the hold.
    assert r["slow"]["runs"] == TINY.slow_runs
    assert r["slow"]["finished_p50"] >= TINY.hold_seconds, r["slow"]
    assert r["check"]["measured_p50"] is not None and r["check"]["requests"] == TINY.check_requests
    for heading in ("realistic / instant", "B beside slow A", "drawn p50 / p99"):
        assert heading in text
    rows = [line for line in text.splitlines() if line.startswith("| 1 |")]
    assert len(rows) == 3 and not any("—" in line for line in rows), text


def test_realistic_profile_is_seeded_per_key_and_has_the_asked_shape():
    profile = TINY.profile
    keys = [f"k{i}" for i in range(20_000)]
    first = [profile.latency(k) for k in keys]
    assert first == [type(profile)(**vars(profile)).latency(k) for k in keys]  # same draws in another run
    answered = sorted(v for v in first if v < profile.hang_seconds)
    hanging = len(first) - len(answered)
    assert 0.005 < hanging / len(first) < 0.015  # ~1 % hang
    assert 0.13 < answered[len(answered) // 2] < 0.17  # median ~150 ms
    assert 1.6 < answered[int(0.99 * len(answered))] < profile.hang_seconds  # p99 ~2 s (capped by the hang)
