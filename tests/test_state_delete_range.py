"""``StateTable.delete_range``: both backends remove exactly ``start <= key < end``,
cached (unflushed) writes included."""

from __future__ import annotations

from pathlib import Path

import pytest

from kstream.state.base import KeyedStateBackend, TableSpec
from kstream.state.memory import MemoryBackend
from kstream.state.rocksdb import RocksDBBackend


@pytest.fixture(params=["memory", "rocksdb"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> KeyedStateBackend:
    if request.param == "memory":
        return MemoryBackend()
    b = RocksDBBackend(tmp_path / "task", cache_entries=8)
    request.addfinalizer(b.close)
    return b


def test_delete_range_removes_exactly_the_range(backend: KeyedStateBackend) -> None:
    t = backend.table(TableSpec("acc"))
    for end in (100, 200, 300):
        for key in (b"a", b"b\x00", b"c"):
            t.put((end, end - 100, key), end)
    # RocksDB: the 9th put flushed the write cache; these two stay in it.
    t.put((200, 100, b"d"), 7)
    t.put((300, 200, b"e"), 9)
    t.delete_range((101,), (201,))
    assert list(t.scan()) == [
        ((100, 0, b"a"), 100),
        ((100, 0, b"b\x00"), 100),
        ((100, 0, b"c"), 100),
        ((300, 200, b"a"), 300),
        ((300, 200, b"b\x00"), 300),
        ((300, 200, b"c"), 300),
        ((300, 200, b"e"), 9),
    ]
    assert t.get((200, 100, b"d")) is None
    t.put((200, 100, b"d"), 8)  # a key can be written again after its range was deleted
    assert t.get((200, 100, b"d")) == 8
    assert [k for k, _ in t.scan_range((200,), (201,))] == [(200, 100, b"d")]
    t.delete_range((300,), (300,))  # empty range: nothing happens
    assert len(list(t.scan())) == 8
