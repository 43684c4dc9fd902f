"""The cyclic garbage collector in Chime's long-running processes (issue #12).

A worker child delivering 20,000 runs of a spike spent 37 % of its CPU in the collector (measured
with gc.callbacks, `bench.delivery_stages --worker --n 20000 --hosts 1`: ~3 s of ~8 CPU-s per
child): 13-15 full collections of ~160 ms each, every one walking every object the process loaded
at start (Django, Celery, DRF, the app's modules), which are never garbage, and ~1,600 young
collections, one per 700 container allocations, which a batch of 25 runs makes by the thousand.

`settle()`, once a process has loaded what it keeps for its life: collect once, then
`gc.freeze()` moves every surviving object into the permanent generation, which no later
collection walks; and the first generation's threshold goes up to CHIME_GC_THRESHOLD allocations,
so young collections come ~30 times less often. The collector still runs: cycles made while the
process works (asyncio tasks and futures, exceptions and their tracebacks, responses) are freed
as before, only the objects that were there from the start are no longer visited again and
again. In a prefork worker the parent settles before it forks (the children inherit the frozen
generation and their pages stay shared) and each child settles again after its own start-up.
"""

import gc

from django.conf import settings


def settle(*, collect: bool = True) -> None:
    """Freeze what this process holds now and raise the young generation's threshold.
    `collect=False` in a prefork child: a collection there would walk (and copy, page by page)
    what the parent froze."""
    if collect:
        gc.collect()
    gc.freeze()
    threshold = settings.CHIME_GC_THRESHOLD
    if threshold > 0:
        _, older, oldest = gc.get_threshold()
        gc.set_threshold(threshold, older, oldest)
