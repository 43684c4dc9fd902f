"""The isolation bench (issue #10): endpoint latency and a slow tenant, against any tree of Chime.

`python -m bench.isolation --help`; see docs/benchmarks.md#isolation.
"""
