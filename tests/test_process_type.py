"""Which process type a command line is (config/process.py): it sizes the database pool and names
the connection and every log line, so the tests' `python -m ...` commands must read as the
Procfile's do."""

import pytest

from config.process import process_type


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["/usr/bin/uvicorn", "config.asgi:application"], "web"),
        (["/venv/lib/python3.11/site-packages/uvicorn/__main__.py", "config.asgi:application"], "web"),
        (["/venv/bin/celery", "-A", "config", "worker"], "worker"),
        (["/venv/lib/python3.11/site-packages/celery/__main__.py", "-A", "config", "worker"], "worker"),
        (["/venv/bin/celery", "-A", "config", "worker", "-Q", "runs.high,runs.default,runs.low"], "worker"),
        (["/venv/bin/celery", "-A", "config", "worker", "-Q", "ops", "--concurrency", "1"], "ops"),
        (["/venv/lib/python3.11/site-packages/celery/__main__.py", "-A", "config", "worker", "--queues=ops"], "ops"),
        (["manage.py", "run_scheduler"], "scheduler"),
        (["manage.py", "migrate", "--noinput"], "release"),
        (["manage.py", "shell"], "manage"),
    ],
)
def test_a_command_line_reads_as_its_process_type(argv, expected, monkeypatch):
    monkeypatch.delenv("CHIME_PROCESS_TYPE", raising=False)
    assert process_type(argv) == expected
