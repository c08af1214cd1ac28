"""RocksDB keyed state: the stored value format (compact ints, their serdes and TTL
write times, values written before it, corrupt widths) and a flush of every kind of
cached entry in one batch."""

from __future__ import annotations

from pathlib import Path

import pytest

from kstream.state.base import TableSpec
from kstream.state.keys import encode_key
from kstream.state.rocksdb import RocksDBBackend, StateError
from tests.test_state_rocksdb import FakeClock

# Body widths 1, 2, 4, 8 at their bounds; beyond int64; bools (JSON true / false).
INT_VALUES = [0, 1, -1, 127, -128, 128, -129, 2**15 - 1, -(2**15), 2**15, 2**31 - 1]
INT_VALUES += [-(2**31), 2**31, -(2**31) - 1, 2**63 - 1, -(2**63), 2**63, -(2**63) - 1]
INT_VALUES += [10**30, True, False]


def test_ints_take_the_compact_format_and_round_trip_exactly(tmp_path: Path) -> None:
    b = RocksDBBackend(tmp_path)
    t = b.table(TableSpec("counts"))
    for i, v in enumerate(INT_VALUES):
        t.put((i,), v)
    t.put(("none",), None)
    b.flush()
    # int64 ints: header 0x04 + the shortest body; the rest (bool, big ints) stays JSON.
    stored = [t._cf.get(encode_key((i,))) for i in range(len(INT_VALUES))]
    assert stored[:4] == [b"\x04\x00", b"\x04\x01", b"\x04\xff", b"\x04\x7f"]
    assert [len(raw) - 1 for raw in stored[4:16]] == [1, 2, 2, 2, 2, 4, 4, 4, 8, 8, 8, 8]
    assert stored[7] == b"\x04\x7f\xff" and stored[15] == b"\x04\x80" + bytes(7)
    assert stored[16] == b"\x00" + str(2**63).encode()
    assert stored[-2:] == [b"\x00true", b"\x00false"]
    b.close()
    b2 = RocksDBBackend(tmp_path)
    t2 = b2.table(TableSpec("counts"))
    got = [t2.get((i,)) for i in range(len(INT_VALUES))]
    scanned = [v for k, v in t2.scan() if k != ("none",)]
    for values in (got, scanned):
        assert values == INT_VALUES
        assert [type(v) for v in values] == [type(v) for v in INT_VALUES]
    assert t2.get(("none",), "absent") is None
    b2.close()


def test_ints_in_tables_of_other_serdes_keep_their_serde(tmp_path: Path) -> None:
    b = RocksDBBackend(tmp_path)
    t = b.table(TableSpec("text", value_serde="str"))
    t.put(("k",), 5)
    b.flush()
    assert t._cf.get(encode_key(("k",))) == b"\x005"
    assert t.get(("k",)) == "5"  # what the str serde makes of it, as before
    b.close()


def test_ints_in_a_ttl_table_carry_their_write_time(tmp_path: Path) -> None:
    clock = FakeClock(1_000.0)
    b = RocksDBBackend(tmp_path, clock=clock)
    t = b.table(TableSpec("ttl", ttl=10.0))
    t.put(("a",), 3)
    t.put(("big",), 2**70)
    b.flush()
    assert t._cf.get(encode_key(("a",))) == b"\x05" + (1_000_000).to_bytes(8, "big") + b"\x03"
    assert t.get(("a",)) == 3
    assert list(t.scan()) == [(("a",), 3), (("big",), 2**70)]
    clock.now = 1_011.0
    assert list(t.scan()) == []
    assert t.get(("a",), "expired") == "expired"
    b.close()


def test_values_written_before_the_compact_int_format_still_decode(tmp_path: Path) -> None:
    """State restored from an older checkpoint holds ints as JSON digits."""
    clock = FakeClock(1_000.0)
    b = RocksDBBackend(tmp_path, clock=clock)
    t = b.table(TableSpec("old"))
    timed = b.table(TableSpec("old_ttl", ttl=10.0))
    written_at = (999_000).to_bytes(8, "big")
    old_format = {
        ("count",): b"\x0042",
        ("neg",): b"\x00-3",
        ("zero",): b"\x000",
        ("dict",): b'\x00{"c":1}',
        ("none",): b"\x02",
    }
    for key, raw in old_format.items():
        t._cf.put(encode_key(key), raw)
    timed._cf.put(encode_key(("count",)), b"\x01" + written_at + b"42")
    timed._cf.put(encode_key(("none",)), b"\x03" + written_at)
    expected = {("count",): 42, ("neg",): -3, ("zero",): 0, ("dict",): {"c": 1}, ("none",): None}
    assert {k: t.get(k, "absent") for k in old_format} == expected
    assert dict(t.scan()) == expected
    assert timed.get(("count",)) == 42
    assert list(timed.scan()) == [(("count",), 42), (("none",), None)]
    clock.now = 1_009.5
    assert list(timed.scan()) == []
    # Rewritten values take the new format and read back the same.
    t.put(("count",), t.get(("count",)) + 1)
    b.flush()
    assert t.get(("count",)) == 43
    assert t._cf.get(encode_key(("count",))) == b"\x04\x2b"
    b.close()


def test_a_compact_int_of_an_impossible_width_is_reported_as_corrupt(tmp_path: Path) -> None:
    b = RocksDBBackend(tmp_path)
    t = b.table(TableSpec("bad"))
    t._cf.put(encode_key(("k",)), b"\x04\x00\x01\x02")
    with pytest.raises(StateError, match="'bad': corrupt stored value"):
        t.get(("k",))
    with pytest.raises(StateError, match="corrupt"):
        list(t.scan())
    b.close()


def test_flush_handles_every_kind_of_cached_entry_in_one_batch(tmp_path: Path) -> None:
    b = RocksDBBackend(tmp_path)
    t = b.table(TableSpec("mixed"))
    t.put(("keep",), 1)
    b.flush()
    entries = {("i",): 5, ("big",): -(2**64), ("b",): True, ("s",): "x", ("n",): None}
    for k, v in entries.items():
        t.put(k, v)
    t.delete(("keep",))
    assert t.flush() == len(entries) + 1
    assert dict(t.scan()) == entries
    b.close()
