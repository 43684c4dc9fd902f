"""One run yields linked scheduler, release and delivery spans (issue #13, acceptance), with an
in-memory OpenTelemetry exporter: the real scheduler tick (materialize and release, publishing to
Redis) and the real delivery to a receiver on 127.0.0.1, whose request carries a traceparent it
can parse and that names the delivery span."""

import re
import uuid

import pytest
import redis
from django.conf import settings
from django.utils import timezone
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from apps.core import tracing
from apps.delivery.services import deliver_runs
from apps.jobs.models import JobRun, ScheduleType
from apps.jobs.services import job_create
from apps.scheduler.leases import LeaseKeeper, ensure_lease_rows
from apps.scheduler.services import scheduler_tick

pytestmark = pytest.mark.django_db

TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-01$")


@pytest.fixture
def exporter():
    exporter = InMemorySpanExporter()
    tracing.configure("test", exporter=exporter)
    yield exporter
    exporter.shutdown()  # the provider stays for the process; a shut exporter keeps nothing more


@pytest.fixture
def broker(redis_required):
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.flushdb()
    yield client
    client.flushdb()


def test_one_run_yields_linked_materialize_release_and_delivery_spans(tenant, receiver, exporter, broker):
    ensure_lease_rows()
    job = job_create(
        tenant=tenant, name="traced", schedule_type=ScheduleType.ONCE, run_at=timezone.now(), target_url=receiver.url
    )
    leases = LeaseKeeper(candidates=[job.partition], pinned=True)
    leases.refresh()
    result = scheduler_tick(leases=leases)
    assert result.materialized == 1 and result.released == 1
    run = JobRun.objects.get(definition=job)
    assert deliver_runs([str(run.id)]).as_dict()["outcomes"] == {"succeeded": 1}

    spans = {span.name: span for span in exporter.get_finished_spans()}
    materialize, release, deliver = spans["chime.materialize"], spans["chime.release"], spans["chime.deliver"]
    run_trace = uuid.UUID(str(run.id)).int
    assert run_trace in [link.context.trace_id for link in materialize.links], "the batch links to the run"
    assert run_trace in [link.context.trace_id for link in release.links], "the release links to the run"
    assert deliver.context.trace_id == run_trace, "the delivery is a span of the run's trace"
    assert deliver.attributes["chime.run_id"] == str(run.id)
    assert deliver.attributes["http.response.status_code"] == 200

    (delivery,) = receiver.received()
    trace_id, parent_id = TRACEPARENT.match(delivery.headers["traceparent"]).groups()
    assert uuid.UUID(trace_id) == run.id, "a receiver finds the run from the trace id"
    assert int(parent_id, 16) == deliver.context.span_id, "the receiver's spans continue the delivery span"
