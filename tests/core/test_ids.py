"""apps/core/ids.py: the text of a uuid, remembered (the worker's path turns each run id into text
several times)."""

import os
import time
import uuid

import pytest

from apps.core.ids import id_text, uuid7, uuid_text


def test_the_text_is_the_uuids_own_and_is_remembered():
    value = uuid.uuid4()
    before = uuid_text.cache_info()
    assert uuid_text(value) == str(value)
    assert uuid_text(uuid.UUID(str(value))) == str(value)  # an equal uuid: the same entry
    after = uuid_text.cache_info()
    assert (after.misses - before.misses, after.hits - before.hits) == (1, 1)


def test_the_text_is_canonical_for_every_kind_of_uuid():
    # Leading zeros, every version the app makes or reads.
    for value in (
        uuid.UUID(int=0),
        uuid.UUID(int=1),
        uuid.UUID(int=(1 << 128) - 1),
        uuid.uuid1(),
        uuid.uuid4(),
        uuid7(),
    ):
        assert id_text(value) == str(value)


def test_text_passes_through_without_taking_a_place():
    size = uuid_text.cache_info().currsize
    text = str(uuid.uuid4())
    assert id_text(text) is text
    assert uuid_text(text) is text
    assert uuid_text.cache_info().currsize == size
    value = uuid.uuid4()
    assert id_text(value) == str(value)


def test_the_cache_is_bounded():
    assert uuid_text.cache_info().maxsize is not None


def _millis(value: uuid.UUID) -> int:
    return value.int >> 80


def test_new_ids_are_version_7_and_increase_within_a_process():
    ids = [uuid7() for _ in range(10_000)]
    assert all(isinstance(value, uuid.UUID) and value.version == 7 for value in ids)
    assert all(value.variant == uuid.RFC_4122 for value in ids)
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)


def test_an_ids_time_is_the_clocks_however_fast_ids_are_made():
    """100,000 ids made as fast as one process can (a scheduler's spike makes that many within
    seconds): each names the millisecond it was made in. uuid6's uuid7() moved one millisecond
    ahead per id made within a millisecond, and its last id here was ~100 s in the future."""
    before = time.time_ns() // 1_000_000
    ids = [uuid7() for _ in range(100_000)]
    after = time.time_ns() // 1_000_000
    assert before <= _millis(ids[0]) <= _millis(ids[-1]) <= after


def test_a_forked_child_and_its_parent_make_no_same_id_in_the_same_milliseconds():
    """A prefork worker's children make attempt ids side by side. The ids' random part comes from
    an RNG in the process; a child that kept its parent's state would make the parent's ids in
    the same millisecond. uuid_utils reseeds at os.fork (as billiard forks). Forked with libc's
    fork(), which skips that, this made 178-666 of the ids the same (measured, issue #12)."""
    uuid7()  # the RNG is in use before the fork, as in a worker's parent
    read, write = os.pipe()
    start = time.time_ns() // 1_000_000 + 50  # both make ids from this millisecond...
    stop = start + 20  # ...to this one
    pid = os.fork()
    if pid == 0:  # the child: its ids to the parent, then out, whatever happens
        try:
            os.close(read)
            with os.fdopen(write, "wb") as pipe:
                pipe.write(",".join(_ids_between(start, stop)).encode())
        finally:
            os._exit(0)
    os.close(write)
    ids = _ids_between(start, stop)
    with os.fdopen(read, "rb") as pipe:
        child = set(pipe.read().decode().split(","))
    os.waitpid(pid, 0)
    same_time = {value[:13] for value in child} & {value[:13] for value in ids}  # the millisecond
    if not same_time:
        pytest.skip("the child and the parent made no id in the same millisecond (a loaded machine)")
    assert not child & set(ids)


def _ids_between(start: int, stop: int) -> list[str]:
    """The ids this process makes from millisecond `start` until `stop`, as text."""
    while time.time_ns() // 1_000_000 < start:
        pass
    ids = []
    while time.time_ns() // 1_000_000 < stop:
        ids.append(str(uuid7()))
    return ids
