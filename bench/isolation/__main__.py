"""Isolation bench (issue #10): runs/s under a realistic endpoint next to an instant one, and
other tenants' fire lag with and without a slow tenant, against this tree or another (--code).

    .venv/bin/python -m bench.isolation                     # full sizes, 2 rounds (~10 min before #10)
    .venv/bin/python -m bench.isolation --quick             # bounded: smaller sizes (~4 min)
    .venv/bin/python -m bench.isolation --code /work/wt/window --md bench/results/isolation-after.md
    bench/run isolation --quick                             # the same through bench/run

Starts private PostgreSQL and Redis servers (never the machine's 5432 / 6379), the receiver and
the tree's Procfile scheduler and worker. See docs/benchmarks.md#isolation.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # runnable as a file too

from bench.chaos.servers import missing_binaries
from bench.common import acquire_bench_lock, log, machine_info, table
from bench.isolation.harness import FULL, QUICK, ROOT, run
from bench.isolation.report import markdown, summarize


def header(command: str, result: dict) -> str:
    info = {k: v for k, v in machine_info().items() if not k.startswith("PostgreSQL") and k != "Redis"}
    info.update(result.get("servers", {}))
    return "\n".join(
        ["# Chime benchmark results", "", f"Command: `{command}` (from the repository root).", "",
         table(["", ""], [[k, v] for k, v in info.items()]), ""]
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes for a bounded run")
    parser.add_argument("--code", type=Path, default=ROOT, help="the Chime tree to run (default: this one)")
    parser.add_argument("--rounds", type=int, help="repeat every measurement (default 2)")
    parser.add_argument("--runs", type=int, help="runs per throughput phase (default 3,000; --quick 600)")
    parser.add_argument("--concurrency", type=int, help="WORKER_CONCURRENCY (default 2, the Procfile's)")
    parser.add_argument("--md", metavar="FILE", help="append the markdown report to FILE (a new one gets a header)")
    parser.add_argument("--json", metavar="FILE", help="also write the raw results as JSON")
    parser.add_argument("--no-setup", action="store_true", help="accepted for bench/run; nothing to set up")
    args = parser.parse_args(argv)
    missing = missing_binaries()
    if missing:
        print(f"the isolation bench needs: {', '.join(missing)}", file=sys.stderr)
        return 2
    acquire_bench_lock()
    sizes = QUICK if args.quick else FULL
    given = {"rounds": args.rounds, "runs": args.runs, "concurrency": args.concurrency}
    overrides = {k: v for k, v in given.items() if v}
    sizes = replace(sizes, **overrides)
    command = "python -m bench.isolation " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    result = run(sizes, code=args.code, log=lambda message: log(f"isolation: {message}"))
    summary = summarize(result)
    text = markdown(result, summary, command.strip())
    print(text, flush=True)
    if args.md:
        md = Path(args.md)
        prefix = "" if md.exists() and md.stat().st_size else header(command.strip(), result) + "\n"
        with md.open("a") as fh:
            fh.write(prefix + text + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps({"result": result, "summary": summary}, default=str))
    return 0 if all(r["complete"] for r in summary["rounds"]) else 1


if __name__ == "__main__":
    sys.exit(main())
