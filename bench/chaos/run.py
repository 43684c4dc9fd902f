"""The fault suite: each scenario on its own private PostgreSQL and Redis, a spike, one fault.

    bench/chaos/run                                   # every scenario, 3,000 runs, 400 s each at most
    bench/chaos/run --scenario redis-restart --scenario pg-restart-fast --runs 1000 --timeout 120
    bench/chaos/run --json                            # the full results as JSON on stdout

Prints a markdown table (and writes it with --md FILE). Process logs of each scenario are kept in
bench/results/logs/chaos/<scenario>/ (not committed). See docs/operations.md#fault-suite.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # runnable as `python bench/chaos/run.py` too

from bench.chaos.harness import Options, build_template, run_scenario
from bench.chaos.processes import ROOT
from bench.chaos.scenarios import SCENARIOS
from bench.chaos.servers import make_workspace, missing_binaries, remove_workspace


def _s(value) -> str:
    if value is None:
        return "—"
    return "before the fault" if value < 0 else f"{value:.1f} s"


def describe_audit(audit: dict) -> str:
    if not audit.get("ran"):
        return "skipped"
    if audit.get("violations") is None:
        return "error"
    return "clean" if audit["violations"] == 0 and audit.get("exit_code") == 0 else f"{audit['violations']} violations"


def table(results: list[dict]) -> str:
    headers = [
        "scenario", "runs", "due", "open at fault", "crashed", "lost", "dup rows", "dup deliveries", "stuck",
        "worker_lost attempts", "all delivered after fault", "after recovery", "after spike start",
        "max fire lag", "all terminal after fault", "audit",
    ]  # fmt: skip
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['scenario']} | {r['runs']:,} | harness error: {r['error']} |" + " |" * 13)
            continue
        never = f"not within {r['waited']:.0f} s" if r["all_delivered_after_fault"] is None else None
        cells = [
            r["scenario"],
            f"{r['runs']:,}",
            f"over {r['spread']:g} s" if r.get("spread") else "at once",
            "—" if r.get("open_at_fault") is None else f"{r['open_at_fault']:,}",
            ", ".join(r.get("crashed") or {}) or "none",
            f"{r['lost']:,}",
            f"{r['duplicate_rows']:,}",
            f"{r['duplicate_deliveries']:,}",
            f"{r['stuck']:,}",
            f"{r['attempts'].get('worker_lost', 0):,}",
            never or _s(r["all_delivered_after_fault"]),
            never or _s(r["all_delivered_after_recovery"]),
            never or _s(r["all_delivered_after_spike"]),
            _s(r["fire_lag_max"]),
            _s(r["all_terminal_after_fault"]) if r["all_terminal_after_fault"] is not None else "not within timeout",
            describe_audit(r["audit"]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def notes(results: list[dict]) -> str:
    out = []
    for r in results:
        if "error" in r:
            continue
        items = list(r.get("notes", []))
        fault = r.get("fault") or {}
        keys = ("shutdown_seconds", "takeover_seconds", "stopped_in_transaction", "stopped_holding_locks")
        for key in (*keys, "restart_seconds"):
            if key in fault:
                items.append(f"{key.replace('_', ' ')}: {fault[key]}")
        if r.get("crashed"):
            items.append(f"**crashed** (exited by itself, exit code): {r['crashed']}")
        if r["stuck"]:
            items.append(f"statuses at the end: {r['statuses']}")
        if not r["audit"].get("ran"):
            items.append(r["audit"]["note"])
        elif r["audit"].get("violations"):
            items.append(f"audit: {json.dumps(r['audit'].get('report'))[:600]}")
        if items:
            out.append(f"- **{r['scenario']}**: " + "; ".join(str(i) for i in items))
    return "\n".join(out)


def revision(code: Path) -> str:
    try:
        head = subprocess.run(
            ["git", "-C", str(code), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(code), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        return head + (" + uncommitted changes" if dirty else "")
    except (subprocess.CalledProcessError, OSError):
        return str(code)


def run(names: list[str], options: Options) -> list[dict]:
    """Build the migrated template once, then every scenario; a failing one is reported, not fatal."""
    workspace = make_workspace()
    results = []
    try:
        print(f"[chaos] migrating a template database ({options.code})", file=sys.stderr, flush=True)
        template = build_template(workspace, options.log_dir, options.code)
        for name in names:
            t0 = time.monotonic()
            print(f"[chaos] {name}: {SCENARIOS[name].description}", file=sys.stderr, flush=True)
            try:
                result = run_scenario(SCENARIOS[name], options, template)
            except Exception as exc:  # reported in the table; the other scenarios still run
                result = {"scenario": name, "runs": options.runs, "error": f"{type(exc).__name__}: {exc}"[:300]}
            result["wall_seconds"] = round(time.monotonic() - t0, 1)
            print(f"[chaos] {name}: done in {result['wall_seconds']} s", file=sys.stderr, flush=True)
            results.append(result)
    finally:
        remove_workspace(workspace)
    return results


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", action="append", choices=list(SCENARIOS), help="repeatable; default: all")
    parser.add_argument("--runs", type=int, default=3000, help="runs in the spike (default 3000)")
    parser.add_argument("--timeout", type=float, default=400.0, help="seconds after the spike to give up (400)")
    parser.add_argument("--settle", type=float, help="... or this many seconds after the fault was lifted")
    parser.add_argument(
        "--spread",
        type=float,
        help="spread the runs over this many seconds (default: 20 s for the scheduler "
        "scenarios, 0 = one instant for the others)",
    )
    parser.add_argument(
        "--fault-at",
        type=float,
        default=3.0,
        help="seconds into the spike (default 3), or once a third of the runs was delivered if sooner",
    )
    parser.add_argument("--tenants", type=int, default=3)
    parser.add_argument("--code", type=Path, default=ROOT, help="the Chime checkout to run (default: this one)")
    parser.add_argument("--json", action="store_true", help="print the full results as JSON instead of a table")
    parser.add_argument("--md", metavar="FILE", help="also write the markdown table to FILE")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.timeout <= args.fault_at:
        parser.error("need --runs >= 1 and --timeout > --fault-at")
    missing = missing_binaries()
    if missing:
        print(f"the fault suite needs: {', '.join(missing)}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _interrupt)  # so every `finally` stops what it started
    options = Options(
        runs=args.runs,
        tenants=args.tenants,
        spread=args.spread,
        fault_at=args.fault_at,
        timeout=args.timeout,
        settle=args.settle,
        code=args.code.resolve(),
    )
    names = args.scenario or list(SCENARIOS)
    results = run(names, options)
    head = (
        f"Fault suite: {options.runs:,} `once` runs of {options.tenants} tenants per scenario; the fault "
        f"{options.fault_at:g} s into the spike (or once a third was delivered, if sooner); code "
        f'{revision(options.code)}; {os.cpu_count()} cores. Times in seconds; "after recovery" counts '
        "from the fault's end (server back, process restarted, SIGCONT).\n"
    )
    text = head + "\n" + table(results) + "\n\n" + notes(results) + "\n"
    print(json.dumps(results, indent=2, default=str) if args.json else text)
    if args.md:
        Path(args.md).write_text(text)
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
