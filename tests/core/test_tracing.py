"""Trace identity of a run (issue #13, deliverable 4): the run id is the trace id, so every span of
a run joins one trace and the webhook's traceparent continues it."""

import re
import uuid

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from apps.core import tracing

TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-01$")


def test_traceparent_carries_the_run_id_as_trace_id_and_differs_per_attempt():
    run_id = uuid.uuid4()
    first, second = tracing.traceparent(run_id, attempt=1), tracing.traceparent(run_id, attempt=2)
    trace_id, parent_id = TRACEPARENT.match(first).groups()
    assert uuid.UUID(trace_id) == run_id
    assert TRACEPARENT.match(second).group(1) == trace_id and TRACEPARENT.match(second).group(2) != parent_id
    assert tracing.traceparent(run_id, attempt=1) == first, "the same attempt gets the same parent id again"
    assert int(parent_id, 16) != 0


def test_a_recorded_span_of_a_run_is_in_the_runs_trace_and_names_itself_in_the_header():
    exporter = InMemorySpanExporter()
    tracing.configure("test", exporter=exporter)
    run_id, other = uuid.uuid4(), uuid.uuid4()
    span = tracing.tracer().start_span("chime.deliver", context=tracing.run_parent(run_id))
    header = tracing.traceparent(run_id, attempt=1, span=span)
    span.end()
    with tracing.tracer().start_as_current_span("chime.release", links=tracing.run_links([run_id, other])):
        pass
    deliver, release = exporter.get_finished_spans()[-2:]
    exporter.shutdown()
    assert deliver.context.trace_id == run_id.int
    assert deliver.parent.span_id == tracing.run_context(run_id).span_id
    assert header == f"00-{run_id.int:032x}-{deliver.context.span_id:016x}-01"
    assert [link.context.trace_id for link in release.links] == [run_id.int, other.int]


def test_a_batch_links_at_most_max_links_runs():
    links = tracing.run_links(uuid.uuid4() for _ in range(tracing.MAX_LINKS + 50))
    assert len(links) == tracing.MAX_LINKS


def test_sentry_is_on_with_a_dsn_and_sends_no_personal_data():
    """SENTRY_DSN set: every process initializes Sentry from its settings (no event is sent here:
    the DSN points at a closed port and nothing is captured)."""
    import subprocess
    import sys

    from tests.support.processes import ROOT, process_env

    probe = (
        "import django; django.setup(); import sentry_sdk; c = sentry_sdk.get_client(); "
        "print(c.is_active(), c.options['send_default_pii'], c.options['environment'])"
    )
    on = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env=process_env(SENTRY_DSN="http://public@127.0.0.1:9/1", SENTRY_ENVIRONMENT="staging"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert on.stdout.split() == ["True", "False", "staging"], on.stderr[-2000:]
    off = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=process_env(SENTRY_DSN=""), capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert off.stdout.split()[0] == "False", off.stderr[-2000:]
