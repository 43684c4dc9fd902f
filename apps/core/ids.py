"""The text of uuids, remembered for a while.

A run's id, and its job's, is turned into text several times on the worker's path: the claim's
bookkeeping, the request's headers and body, the recording's statements, the live events.
`str(UUID)` is pure Python (~0.4 µs), and those conversions were ~7 % of a worker process's GIL
time in a 100k spike (py-spy --gil, issue #12). An LRU of bounded size, so a long-lived process
keeps only the ids it is working on.

The cache is keyed by the uuid's integer, not by the uuid: `UUID.__hash__` is a Python method, so
a lookup keyed by the UUID paid a Python call before it could hit; an int hashes in C. On this
machine a hit through `id_text` costs 0.29 µs against 0.50 µs keyed by the UUID (scratch script,
100,000 lookups of 1,000 ids). A miss costs more than `str()` itself (the LRU's bookkeeping): text of ids
a process sees only once (the scheduler's new runs) is made with `str()`, not here."""

import functools

from uuid_utils import compat as _uuid_utils

# Every id Chime makes: a UUIDv7 (RFC 9562), a standard uuid.UUID.
# - Its first 48 bits are the clock's millisecond. Then comes a 42-bit counter that keeps the ids
#   one process makes within a millisecond increasing (it starts at a random value each
#   millisecond), then 32 random bits. Hard to guess, not secret: every endpoint that takes an id
#   is scoped to its tenant (uuid6 drew 74 random bits).
# - The random bits come from an RNG in the process. uuid_utils reseeds it in a forked child (its
#   os.register_at_fork handler). Without that, a prefork worker's children would make the same
#   ids in the same millisecond (tests/core/test_ids.py).
# - Time-ordered ids keep B-tree inserts local, and make `id >= uuid7_floor(t)`
#   (apps/jobs/audit.py) and the API's newest-first pages (apps/api/pagination.py) mean what they
#   say.
# - uuid6's uuid7(), used before, kept its ids increasing by moving the time one millisecond ahead
#   for every id made within the same millisecond. A process making more than 1,000 ids a second
#   (the scheduler at a spike, the worker's attempts) ran ahead of the clock without bound: 100 s
#   after 100,000 ids (tests/core/test_ids.py). It also cost 1.8 µs an id against 0.8 here
#   (issue #12).
uuid7 = _uuid_utils.uuid7


@functools.lru_cache(maxsize=1 << 14)
def _text_of(number: int) -> str:
    """The canonical text of the uuid whose 128-bit integer is `number` (as UUID.__str__ makes it)."""
    digits = f"{number:032x}"
    return f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"


def id_text(value) -> str:
    """The text of an id: a uuid.UUID's canonical text, remembered; text (a message's run ids are
    text) comes back as it is, without taking a place here."""
    return value if type(value) is str else _text_of(value.int)


uuid_text = id_text  # the name the call sites that hold a UUID use
# The cache's counters, for tests and diagnostics (functools.lru_cache's own).
id_text.cache_info = _text_of.cache_info  # type: ignore[attr-defined]
