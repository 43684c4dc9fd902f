"""The fault suite (issue #9): real Chime processes on private PostgreSQL and Redis servers that it
may kill and restart, a spike of runs, one fault per scenario, and what became of every run.

    bench/chaos/run                         # every scenario, 3,000 runs each
    bench/chaos/run --scenario redis-restart --runs 1000 --timeout 120

See docs/operations.md#fault-suite. The bounded CI form is tests/chaos/test_faults.py.
"""
