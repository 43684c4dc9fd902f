"""apps/metrics/registry.py: a recorded batch's observations written per series at once must give
exactly the samples one `observe` per value gives."""

import math
import uuid

import pytest
from prometheus_client import CollectorRegistry, Histogram

from apps.metrics.registry import LAG_BUCKETS, observe_many


def histogram() -> Histogram:
    """A histogram of its own: in multi-process mode values are keyed by metric name and labels in
    the process's files, so two of one name would share them."""
    return Histogram(f"lag_{uuid.uuid4().hex}", "x", ("priority",), buckets=LAG_BUCKETS, registry=CollectorRegistry())


def samples(histogram: Histogram) -> dict:
    prefix = histogram._name
    return {
        (s.name.removeprefix(prefix), tuple(sorted(s.labels.items()))): s.value
        for m in histogram.collect()
        for s in m.samples
    }


@pytest.mark.parametrize(
    "values",
    [
        [0.0, 0.05, 0.05000001, 0.3, 2, 2, 7.5, 899.9, 900, 901, 1e9],  # on, beside and past the bounds
        [0.2] * 50,
        [],
    ],
)
def test_observe_many_gives_the_samples_of_one_observe_per_value(values):
    one_by_one, at_once = histogram(), histogram()
    child = one_by_one.labels(priority="high")
    for value in values:
        child.observe(value)
    observe_many(at_once.labels(priority="high"), values)
    expected, got = samples(one_by_one), samples(at_once)
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        if key[0] == "_created":
            continue  # when each child was made, not what it observed: the two differ by the time between them
        assert math.isclose(got[key], value, rel_tol=1e-12, abs_tol=1e-9), key
    if values:
        assert expected[("_count", (("priority", "high"),))] == len(values)
