"""apps/core/ids.py: the text of a uuid, remembered (the worker's path turns each run id into text
several times)."""

import uuid

from uuid6 import uuid7

from apps.core.ids import id_text, uuid_text


def test_the_text_is_the_uuids_own_and_is_remembered():
    value = uuid.uuid4()
    before = uuid_text.cache_info()
    assert uuid_text(value) == str(value)
    assert uuid_text(uuid.UUID(str(value))) == str(value)  # an equal uuid: the same entry
    after = uuid_text.cache_info()
    assert (after.misses - before.misses, after.hits - before.hits) == (1, 1)


def test_the_text_is_canonical_for_every_kind_of_uuid():
    # Leading zeros, every version the app makes or reads, and uuid6's subclass.
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
