"""The text of uuids, remembered for a while.

A run's id, and its job's, is turned into text several times on the worker's path: the claim's
bookkeeping, the request's headers and body, the recording's statements, the live events.
`str(UUID)` is pure Python (~0.4 µs), and those conversions were ~7 % of a worker process's GIL
time in a 100k spike (py-spy --gil, issue #12); a hit here costs about a quarter of that. An LRU
of bounded size, so a long-lived process keeps only the ids it is working on."""

import functools


@functools.lru_cache(maxsize=1 << 14)
def uuid_text(value) -> str:
    """str(value), for a uuid.UUID (a str comes back as it is, without taking a place here)."""
    return str(value)


def id_text(value) -> str:
    """The text of an id that may already be text (a message's run ids are)."""
    return value if type(value) is str else uuid_text(value)
