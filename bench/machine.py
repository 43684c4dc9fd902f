"""Print the machine the benches run on and start a results file with it.

.venv/bin/python -m bench.machine --md bench/results/latest.md --command "bench/run --quick"
"""

import argparse
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable as `python bench/x.py` too

from bench.common import ROOT, machine_info, table


def git_revision() -> str:
    try:
        return subprocess.run(
            ["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--md", help="write (overwrite) the results header to FILE")
    parser.add_argument("--command", default="bench/run", help="the command line to record")
    args = parser.parse_args()
    info = machine_info()
    info["code"] = f"git {git_revision()}"
    info["date"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    text = "\n".join(
        [
            "# Chime benchmark results",
            "",
            f"Command: `{args.command}` (from the repository root). Databases: PostgreSQL `chime_bench`, Redis DB 14.",
            "",
            table(["", ""], [[k, v] for k, v in info.items()]),
            "",
        ]
    )
    print(text, flush=True)
    if args.md:
        with open(args.md, "w") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
