"""Every metric a Chime process records, in one place (docs/operations.md#metrics).

Counters and histograms live in the process that sees the event: the worker (fire lag, outcomes,
delivery durations), the scheduler (materialized runs, publish errors), the web process (API
cancellations). Gauges that describe the whole system (ready runs, oldest ready run, scheduling
lag, leases, quarantined jobs) are read from PostgreSQL at scrape time instead
(apps/metrics/collectors.py): every process would report the same truth, and none has to keep
it up to date.

Labels are bounded: priority (3), outcome (5), outcome class (6). A tenant label only when
CHIME_METRICS_TENANT_LABEL is on (a small install); with thousands of tenants it would multiply
every series by their number.
"""

from bisect import bisect_left
from collections import defaultdict

from django.conf import settings
from prometheus_client import Counter, Histogram

TENANT = ("tenant",) if settings.CHIME_METRICS_TENANT_LABEL else ()

OUTCOMES = ("succeeded", "failed", "retried", "skipped", "cancelled")
OUTCOME_CLASSES = ("2xx", "4xx", "5xx", "timeout", "network", "refused")

# Fire lag spans milliseconds (steady stream) to minutes (a spike beyond capacity).
LAG_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 900)
DURATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

FIRE_LAG = Histogram(
    "chime_fire_lag_seconds",
    "Start of a run's first delivery attempt minus its scheduled time.",
    ("priority", *TENANT),
    buckets=LAG_BUCKETS,
)
RUNS = Counter(
    "chime_runs",
    "Runs that reached an outcome: succeeded, failed (dead letter), retried (an attempt failed and "
    "another is planned), skipped, cancelled.",
    ("outcome", "priority", *TENANT),
)
DELIVERY_DURATION = Histogram(
    "chime_delivery_duration_seconds",
    "Duration of one delivery attempt, by outcome class (2xx, 4xx, 5xx, timeout, network, refused).",
    ("outcome_class",),
    buckets=DURATION_BUCKETS,
)
MATERIALIZED = Counter("chime_materialized_runs", "Runs the scheduler created from due definitions.")
PUBLISH_ERRORS = Counter(
    "chime_broker_publish_errors", "Failed attempts to hand runs to the broker (they are put back and retried)."
)


def tenant_labels(tenant_id) -> dict:
    return {"tenant": str(tenant_id)} if TENANT else {}


def outcome_class(status_code: int | None, error_kind: str | None) -> str:
    """The outcome class of one attempt: its HTTP status family, or the transport's error kind
    (apps/delivery/webhook_types.py: timeout, refused, invalid_target, network, interrupted)."""
    if status_code:
        return {2: "2xx", 4: "4xx"}.get(status_code // 100, "5xx" if status_code >= 500 else "4xx")
    if error_kind == "timeout":
        return "timeout"
    if error_kind in ("refused", "invalid_target"):
        return "refused"  # Chime refused to send it (a private address, an unusable target)
    return "network"


def count_runs(outcome: str, rows) -> None:
    """chime_runs_total += 1 per (priority, tenant_id) of `rows` (runs that reached `outcome`)."""
    from collections import Counter

    for (priority, tenant_id), n in Counter((p, t) for p, t in rows).items():
        RUNS.labels(outcome=outcome, priority=priority, **tenant_labels(tenant_id)).inc(n)


def attempts_recorded(attempts) -> None:
    """Delivery durations of recorded attempts, and the fire lag of each first attempt:
    `attempts` are (priority, tenant_id, number, scheduled_for, started_at, duration_ms,
    status_code, error_kind). A recorded batch's values are observed per series at once
    (`observe_many`)."""
    durations: dict[str, list[float]] = defaultdict(list)
    lags: dict[tuple, list[float]] = defaultdict(list)
    for priority, tenant_id, number, scheduled_for, started_at, duration_ms, status_code, error_kind in attempts:
        if duration_ms is not None:
            durations[outcome_class(status_code, error_kind)].append(duration_ms / 1000)
        if number == 1 and started_at is not None:
            key = (priority, tenant_id) if TENANT else (priority, None)
            lags[key].append(max((started_at - scheduled_for).total_seconds(), 0.0))
    for klass, values in durations.items():
        observe_many(DELIVERY_DURATION.labels(outcome_class=klass), values)
    for (priority, tenant_id), values in lags.items():
        observe_many(FIRE_LAG.labels(priority=priority, **tenant_labels(tenant_id)), values)


def observe_many(histogram, values: list[float]) -> None:
    """`histogram.observe(v)` for each value, in one write to the sum and one per bucket touched.

    In multi-process mode (the worker's prefork children) each write locks, checks the pid and
    writes the mmapped file: two writes per observation were ~4 % of a worker process's CPU at a
    spike (py-spy, issue #12). This reads prometheus_client's Histogram internals (`_sum`,
    `_buckets`, `_upper_bounds`, as `observe` itself does); tests/metrics/test_registry.py holds
    it to the samples `observe` gives, so an upgrade that changes them fails there."""
    if not values:
        return
    bounds = histogram._upper_bounds
    counts = [0] * len(bounds)
    for value in values:
        counts[bisect_left(bounds, value)] += 1  # the first bucket whose bound is >= value
    histogram._sum.inc(sum(values))
    for index, count in enumerate(counts):
        if count:
            histogram._buckets[index].inc(count)
