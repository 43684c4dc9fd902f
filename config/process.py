"""Which Procfile process type this is (web, worker, scheduler, release), for per-process
settings such as the size of the database pool and the connection's `application_name`.

`CHIME_PROCESS_TYPE` says it explicitly; otherwise it is read off the command line, so the
Procfile needs no extra variables.
"""

import os
import sys

PROCESS_TYPES = ("web", "worker", "scheduler", "release", "manage", "test")
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
        return "worker"
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
