"""Traces (OpenTelemetry), on when OTEL_EXPORTER_OTLP_ENDPOINT is set (docs/operations.md#traces).

**A run is a trace.** Its trace id is the run's id (a UUID is 128 bits, as a W3C trace id is), so
every span about a run, in whichever process and however many attempts later, lands in one trace
without passing a context through the broker or the database, and a tenant who logs
`webhook-id` can find the trace from it. Each delivery attempt is a span of that trace, and its
W3C `traceparent` header goes out with the webhook, so the tenant's own tracing continues it.

Spans that cover many runs (a scheduler's materialize batch, a release) are spans of their own
with **links** to the runs' traces (at most MAX_LINKS each): a batch of 1,000 is one span, not
1,000, and each run's trace still points at the batch that created and released it.

With tracing off nothing is recorded and the `traceparent` header is still sent: the trace id is
the run id, the parent id derived from the run id and the attempt number.

OTEL_* variables configure the exporter as the OpenTelemetry SDK documents them
(OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_HEADERS, OTEL_SERVICE_NAME, ...); the service
name defaults to `chime-<process type>`.
"""

import hashlib
import os
import uuid

from opentelemetry import trace
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, TraceFlags

MAX_LINKS = 128
TRACER_NAME = "chime"

_configured = False  # set by configure(): with tracing off, the hot path starts no span at all


def enabled() -> bool:
    return bool(os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def configure(process_type: str, *, exporter=None) -> bool:
    """Install the SDK's tracer provider, exporting in batches (a background thread: call it after a
    fork, in the process that traces). `exporter` replaces OTLP (tests pass an in-memory one)."""
    if exporter is None and not enabled():
        return False
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        processor = BatchSpanProcessor(OTLPSpanExporter())
    else:
        processor = SimpleSpanProcessor(exporter)
    global _configured
    _configured = True
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):  # configured already (a test adding its exporter)
        current.add_span_processor(processor)
        return True
    name = os.environ.get("OTEL_SERVICE_NAME") or f"chime-{process_type}"
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)
    return True


def tracer():
    return trace.get_tracer(TRACER_NAME)


def run_trace_id(run_id) -> int:
    return run_id.int if isinstance(run_id, uuid.UUID) else uuid.UUID(str(run_id)).int


def _span_id(run_id, salt: str) -> int:
    digest = hashlib.blake2b(f"{run_id}:{salt}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") or 1


def run_context(run_id) -> SpanContext:
    """The run's trace, as a remote parent: the spans of a run are its children."""
    return SpanContext(
        trace_id=run_trace_id(run_id),
        span_id=_span_id(run_id, "run"),
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )


def run_parent(run_id):
    """An OpenTelemetry Context whose current span is the run's: pass as `context=` to start_span."""
    return trace.set_span_in_context(NonRecordingSpan(run_context(run_id)))


def run_links(run_ids) -> list[Link]:
    return [Link(run_context(run_id)) for run_id in list(run_ids)[:MAX_LINKS]]


def traceparent(run_id, *, attempt: int, span=None) -> str:
    """The W3C traceparent of one delivery attempt: the span's own id when it is recorded, a
    parent id derived from (run, attempt) otherwise."""
    context = span.get_span_context() if span is not None else None
    span_id = context.span_id if context is not None and context.is_valid else _span_id(run_id, f"attempt-{attempt}")
    return f"00-{run_trace_id(run_id):032x}-{span_id:016x}-01"


def delivery_span(run):
    """The span of one delivery attempt of `run`, a child of the run's trace; None when nothing
    records it (tracing off), so the hot path pays only this check."""
    if not _configured:
        return None
    span = tracer().start_span(
        "chime.deliver",
        context=run_parent(run.id),
        kind=trace.SpanKind.CLIENT,
        attributes={
            "chime.run_id": str(run.id),
            "chime.job_id": str(run.definition_id),
            "chime.tenant_id": str(run.tenant_id),
            "chime.attempt": run.attempt_count,
        },
    )
    if not span.is_recording():
        return None
    return span


def end_delivery_span(span, *, status_code: int | None, error_kind: str | None, outcome: str, end) -> None:
    if span is None:
        return
    if status_code:
        span.set_attribute("http.response.status_code", status_code)
    if error_kind:
        span.set_attribute("error.type", error_kind)
    span.set_attribute("chime.outcome", outcome)
    if outcome != "succeeded":
        span.set_status(trace.Status(trace.StatusCode.ERROR, error_kind or f"HTTP {status_code}"))
    span.end(end_time=int(end.timestamp() * 1e9) if end else None)


def link_runs(span, run_ids) -> None:
    """Links from a batch span to the traces of (at most MAX_LINKS of) the runs it handled."""
    if span.is_recording():
        for link in run_links(run_ids):
            span.add_link(link.context)
