"""Structured logs (issue #13, deliverable 3): JSON lines with the fields a line is about, from the
formatter in-process and from the real scheduler and worker processes with LOG_FORMAT=json; and
what must never reach a log."""

import io
import json
import logging
import subprocess
import sys
import threading
import uuid

import pytest

from apps.core.logs import ChimeJsonFormatter, ContextFilter, bind, log_context
from tests.support.processes import ROOT, process_env, start_scheduler, start_worker


@pytest.fixture
def json_lines():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(ChimeJsonFormatter())
    handler.addFilter(ContextFilter())
    logger = logging.getLogger("tests.core.json")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    yield logger, lambda: [json.loads(line) for line in stream.getvalue().splitlines()], handler
    logger.removeHandler(handler)


def test_a_line_carries_the_fields_bound_around_it(json_lines):
    logger, lines, _ = json_lines
    tenant_id, run_id = uuid.uuid4(), uuid.uuid4()
    with log_context(tenant_id=tenant_id, run_id=run_id, partition=7):
        logger.info("delivered %s", "it", extra={"attempt": 2, "webhook_id": str(run_id)})
    logger.info("outside")
    inside, outside = lines()
    assert inside["message"] == "delivered it" and inside["level"] == "INFO" and inside["logger"] == "tests.core.json"
    assert inside["tenant_id"] == str(tenant_id) and inside["run_id"] == str(run_id)
    assert inside["partition"] == 7 and inside["attempt"] == 2 and inside["webhook_id"] == str(run_id)
    assert inside["time"].endswith(("+00:00", "Z")), "times are UTC"
    assert "run_id" not in outside and "tenant_id" not in outside, "a block's fields end with the block"


def test_secrets_headers_and_bodies_never_reach_a_line(json_lines):
    logger, lines, _ = json_lines
    logger.warning(
        "refused",
        extra={
            "secret": "whsec_abc",
            "api_key": "chime_live_xyz",
            "Authorization": "Bearer t0ken",
            "headers": {"X-Api-Key": "hidden"},
            "body": '{"card": "4242"}',
            "run_id": "r1",
        },
    )
    (line,) = lines()
    text = json.dumps(line)
    for leaked in ("whsec_abc", "chime_live_xyz", "t0ken", "hidden", "4242"):
        assert leaked not in text
    assert line["run_id"] == "r1", "the fields that are allowed stay"


def test_process_fields_reach_lines_logged_from_other_threads(json_lines):
    logger, lines, _ = json_lines
    bind(worker="host-a:1234")
    thread = threading.Thread(target=lambda: logger.info("from the recorder thread"))
    thread.start()
    thread.join()
    (line,) = lines()
    assert line["worker"] == "host-a:1234"


def parsed(log_text: str) -> list[dict]:
    """Every line of a process's output as JSON: a line that is not JSON fails the test."""
    return [json.loads(line) for line in log_text.splitlines() if line.strip()]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(180)
def test_the_scheduler_and_the_worker_log_json_lines_that_name_them():
    scheduler = start_scheduler(LOG_FORMAT="json")
    worker = start_worker(LOG_FORMAT="json")
    try:
        scheduler_lines = parsed(scheduler.log())
        worker_lines = parsed(worker.log())
    finally:
        scheduler.stop()
        worker.stop()
    started = next(line for line in scheduler_lines if line["message"].startswith("scheduler started"))
    assert started["process_type"] == "scheduler" and started["worker"] and started["level"] == "INFO"
    assert any(line["message"].endswith("ready.") for line in worker_lines)
    assert {line["process_type"] for line in worker_lines} == {"worker"}


def test_an_unknown_log_format_stops_the_process_with_a_message():
    answer = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=process_env(LOG_FORMAT="xml"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert answer.returncode != 0
    assert "LOG_FORMAT must be 'plain' or 'json', not 'xml'" in answer.stderr


@pytest.mark.django_db
def test_a_quarantine_line_names_its_job_tenant_and_partition(json_lines, tenant, django_capture_on_commit_callbacks):
    from django.utils import timezone

    from apps.scheduler.quarantine import quarantine_definitions
    from tests.factories import JobFactory

    _, lines, handler = json_lines
    job = JobFactory(tenant=tenant)
    scheduler_logger = logging.getLogger("apps.scheduler")
    scheduler_logger.addHandler(handler)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            quarantine_definitions([(job, ValueError("boom"))], now=timezone.now())
    finally:
        scheduler_logger.removeHandler(handler)
    (line,) = [line for line in lines() if line["message"].startswith("quarantined job")]
    assert (line["job_id"], line["tenant_id"], line["partition"]) == (str(job.id), str(tenant.id), job.partition)
    assert job.target_url not in json.dumps(line), "never the target"
