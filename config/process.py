"""Which Procfile process type this is (web, worker, ops, scheduler, release), for per-process
settings such as the size of the database pool and the connection's `application_name`.

`CHIME_PROCESS_TYPE` says it explicitly; otherwise it is read off the command line, so the
Procfile needs no extra variables.
"""

import os
import sys

PROCESS_TYPES = ("web", "worker", "ops", "scheduler", "release", "manage", "test")
# The Celery worker of bulk operations (apps/operations) consumes this queue, and only this one.
OPS_QUEUE = "ops"
_RELEASE_COMMANDS = {"migrate", "collectstatic", "createcachetable"}


def process_type(argv: list[str] | None = None) -> str:
    explicit = os.environ.get("CHIME_PROCESS_TYPE", "").strip()
    if explicit:
        if explicit not in PROCESS_TYPES:
            raise ValueError(f"CHIME_PROCESS_TYPE must be one of {', '.join(PROCESS_TYPES)}, not {explicit!r}")
        return explicit
    argv = sys.argv if argv is None else argv
    # `python -m celery` / `python -m uvicorn` run .../celery/__main__.py: the package is the program.
    words = [_program_name(a) for a in argv[:4]]
    program = words[0] if words else ""
    if program in ("uvicorn", "daphne", "gunicorn") or "uvicorn" in words:
        return "web"
    if "celery" in words or program == "celery":
        return "ops" if _queues(argv) == OPS_QUEUE else "worker"
    if "run_scheduler" in argv:
        return "scheduler"
    if "pytest" in program or "pytest" in words or "py.test" in program:
        return "test"
    if any(a in _RELEASE_COMMANDS for a in argv[1:3]):
        return "release"
    return "manage"


def _program_name(arg: str) -> str:
    name = os.path.basename(arg)
    if name == "__main__.py":
        return os.path.basename(os.path.dirname(arg))
    return name


def _queues(argv: list[str]) -> str:
    """The value of a Celery worker's -Q/--queues option ("" without one)."""
    for index, arg in enumerate(argv):
        if arg in ("-Q", "--queues") and index + 1 < len(argv):
            return argv[index + 1]
        if arg.startswith("--queues="):
            return arg.partition("=")[2]
        if arg.startswith("-Q") and len(arg) > 2:
            return arg[2:]
    return ""
