"""RocksDB keyed state: table contract, write cache, serdes, TTL, persistence."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kstream.state.base import TableSpec
from kstream.state.keys import encode_key
from kstream.state.rocksdb import RocksDBBackend, StateError


class FakeClock:
    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_get_put_delete_and_ordered_scans(tmp_path: Path) -> None:
    b = RocksDBBackend(tmp_path, cache_entries=4)
    t = b.table(TableSpec("windows"))
    for key in [("b", 20), ("a", 10), ("b", 10), ("a", 30), ("c", 5), ("a", 20)]:
        t.put(key, {"sum": key[1]})
    t.delete(("a", 20))
    t.put(("n",), None)
    assert t.get(("a", 10)) == {"sum": 10}
    assert t.get(("a", 20), "gone") == "gone"
    assert t.get(("n",), "absent") is None  # a stored None is not absent
    assert list(t.scan(("a",))) == [(("a", 10), {"sum": 10}), (("a", 30), {"sum": 30})]
    assert [k for k, _ in t.scan()] == [
        ("a", 10),
        ("a", 30),
        ("b", 10),
        ("b", 20),
        ("c", 5),
        ("n",),
    ]
    assert [k for k, _ in t.scan_range(("a", 30), ("b", 20))] == [("a", 30), ("b", 10)]
    assert b.tables() == {"windows": t}
    b.close()


def test_write_cache_is_bounded_and_reads_see_it(tmp_path: Path) -> None:
    b = RocksDBBackend(tmp_path, cache_entries=3)
    t = b.table(TableSpec("t"))
    t.put((1,), "a")
    t.put((2,), "b")
    t.put((1,), "c")  # same key: still 2 cached entries
    assert t.get((1,)) == "c"
    assert t.flush() == 2
    assert t.flush() == 0
    for i in range(4):  # the 4th entry exceeds the bound: all 4 are written
        t.put((10 + i,), i)
    assert t.flush() == 0
    t.put((20,), "x")
    assert t.flush() == 1
    b.close()


def test_state_survives_close_and_reopen(tmp_path: Path) -> None:
    b = RocksDBBackend(tmp_path)
    b.table(TableSpec("a")).put(("k",), [1, 2])
    b.table(TableSpec("b", value_serde="str")).put(("k", 1), "text")
    b.close()  # flushes the cache
    b2 = RocksDBBackend(tmp_path)
    assert b2.stored_tables() == ["a", "b"]
    assert b2.table(TableSpec("a")).get(("k",)) == [1, 2]
    assert list(b2.table(TableSpec("b", value_serde="str")).scan()) == [(("k", 1), "text")]
    b2.close()


def test_value_serdes_bytes_str_json_avro(tmp_path: Path) -> None:
    schema = {
        "type": "record",
        "name": "Agg",
        "fields": [{"name": "count", "type": "long"}, {"name": "tag", "type": "string"}],
    }
    b = RocksDBBackend(tmp_path)
    tables = {
        "raw": (TableSpec("raw", value_serde="bytes"), b"\x00\xff"),
        "txt": (TableSpec("txt", value_serde="str"), "héllo"),
        "js": (TableSpec("js"), {"a": [1, None, "x"]}),
        "av": (TableSpec("av", value_serde=json.dumps(schema)), {"count": 3, "tag": "t"}),
    }
    for spec, value in tables.values():
        b.table(spec).put(("k",), value)
    b.close()
    b2 = RocksDBBackend(tmp_path)
    for spec, value in tables.values():
        assert b2.table(spec).get(("k",)) == value
    b2.close()


def test_reopening_a_table_with_another_spec_is_refused(tmp_path: Path) -> None:
    b = RocksDBBackend(tmp_path)
    b.table(TableSpec("t"))
    with pytest.raises(StateError, match="already open"):
        b.table(TableSpec("t", ttl=5))
    with pytest.raises(StateError, match="invalid table name"):
        b.table(TableSpec("default"))
    b.close()


def test_ttl_hides_expired_entries_from_get_and_scan_and_purges_them(tmp_path: Path) -> None:
    clock = FakeClock(1_000.0)
    b = RocksDBBackend(tmp_path, clock=clock)
    t = b.table(TableSpec("sessions", ttl=10.0))
    forever = b.table(TableSpec("plain"))
    t.put(("old",), 1)
    forever.put(("x",), 1)
    clock.now = 1_006.0
    t.put(("young",), 2)
    b.flush()  # the write time is the put's, not the flush's
    clock.now = 1_010.0
    assert t.get(("old",)) == 1  # exactly at the TTL: still there
    clock.now = 1_010.5
    assert t.get(("old",), "expired") == "expired"
    assert list(t.scan()) == [(("young",), 2)]
    t.put(("cached",), 3)  # expiry also applies to entries still in the cache
    clock.now = 1_021.0
    assert t.get(("cached",)) is None
    assert list(t.scan()) == []
    assert forever.get(("x",)) == 1
    assert b.purge_expired() == 1  # "young"; "old" and "cached" were purged lazily by get
    assert b.purge_expired() == 0
    b.close()


ops = st.lists(
    st.tuples(
        st.sampled_from(["put", "delete", "get", "scan"]),
        st.sampled_from(["t1", "t2"]),
        st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(-3, 3)),
        st.integers(0, 100),
    ),
    max_size=60,
)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=ops)
def test_behaves_like_an_ordered_dict_whatever_the_cache_size(
    tmp_path_factory: pytest.TempPathFactory, ops: list
) -> None:
    b = RocksDBBackend(tmp_path_factory.mktemp("db"), cache_entries=2)
    model: dict[str, dict[tuple, int]] = {"t1": {}, "t2": {}}
    for op, name, key, value in ops:
        t = b.table(TableSpec(name))
        if op == "put":
            t.put(key, value)
            model[name][key] = value
        elif op == "delete":
            t.delete(key)
            model[name].pop(key, None)
        elif op == "get":
            assert t.get(key, -1) == model[name].get(key, -1)
        else:
            expected = sorted((k, v) for k, v in model[name].items() if k[0] == key[0])
            assert list(t.scan((key[0],))) == expected
    for name in model:
        assert list(b.table(TableSpec(name)).scan()) == sorted(model[name].items())
    b.close()


handle_ops = st.lists(
    st.tuples(
        st.sampled_from(["value", "map_put", "map_del", "list", "extend", "ttl", "clear"]),
        st.one_of(st.none(), st.integers(-5, 5), st.sampled_from(["a", "b"]), st.just(b"k")),
        st.one_of(st.integers(0, 3), st.sampled_from(["x", "y"])),
        st.integers(0, 50),
    ),
    max_size=50,
)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=handle_ops)
def test_process_function_state_runs_identically_on_memory_and_rocksdb(
    tmp_path_factory: pytest.TempPathFactory, ops: list
) -> None:
    """The state handles a process function gets (value, map, list, with TTL) store the
    same entries on both backends, the RocksDB one with a write cache smaller than the
    workload."""
    from kstream.api.process import ListState, MapState, StateSpec, ValueState
    from kstream.operators.keyedstate import KeyScope
    from kstream.state.memory import MemoryBackend

    specs: dict[str, StateSpec] = {
        "value": ValueState(),
        "map": MapState(),
        "list": ListState(),
        "ttl": ValueState(ttl_ms=20),
    }
    backends = [MemoryBackend(), RocksDBBackend(tmp_path_factory.mktemp("db"), cache_entries=3)]
    scopes = [KeyScope("n1", b, specs) for b in backends]
    for kind, key, map_key, n in ops:
        for scope in scopes:
            scope.key, scope.timestamp = key, n
            if kind == "value":
                scope["value"].set(n)
            elif kind == "map_put":
                scope["map"].put(map_key, n)
            elif kind == "map_del":
                scope["map"].delete(map_key)
            elif kind == "list":
                scope["list"].append(n)
            elif kind == "extend":
                scope["list"].extend([n, map_key])
            elif kind == "ttl":
                scope["ttl"].set(n)
                scope.watermark = max(scope.watermark, n)
                scope.expire(scope.watermark)
            else:
                scope["value"].clear()
                scope["list"].clear()
                scope["map"].clear()
    mem, rdb = backends
    names = [f"n1.s.{name}" for name in specs] + ["n1.ttl"]
    for name in names:
        assert list(rdb.table(TableSpec(name)).scan()) == list(mem.table(TableSpec(name)).scan())
    for key in (None, -5, 0, 5, "a", "b", b"k"):
        for scope in scopes:
            scope.key = key
        got = [
            (s["value"].get(), s["map"].items(), s["list"].get(), s["ttl"].get()) for s in scopes
        ]
        assert got[0] == got[1]
    rdb.close()


# -- stored value format ----------------------------------------------------------------

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


class CountingGets:
    """A column family proxy that counts point reads (``get``) into RocksDB."""

    def __init__(self, cf: object) -> None:
        self.cf = cf
        self.gets = 0

    def get(self, key: bytes) -> object:
        self.gets += 1
        return self.cf.get(key)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self.cf, name)


def test_entries_flushed_are_read_from_memory_across_flushes(tmp_path: Path) -> None:
    """A snapshot every second flushes the write cache; the counters' next reads must
    not go to RocksDB (they did: a checkpoint's biggest cost on a 2-core machine), not
    only right after the flush that wrote them."""
    b = RocksDBBackend(tmp_path, cache_entries=1_000)
    t = b.table(TableSpec("counts"))
    for i in range(100):
        t.put(("k", i), i)
    t.delete(("k", 5))
    b.snapshot_sync(1)  # flushes the write cache
    counting = CountingGets(t._cf)
    t._cf = counting
    assert [t.get(("k", i)) for i in range(100)] == [None if i == 5 else i for i in range(100)]
    assert counting.gets == 0
    assert t.get(("k", 500), "absent") == "absent" and counting.gets == 1  # never written
    t.put(("k", 1), 41)  # a newer write wins over the read cache
    assert t.get(("k", 1)) == 41
    t.flush()
    b.snapshot_sync(2)  # a flush that writes nothing keeps the read cache too
    assert t.get(("k", 1)) == 41 and t.get(("k", 2)) == 2 and counting.gets == 1
    t.delete_range(("k", 0), ("k", 50))  # drops the cached entries in its range only
    assert t.get(("k", 1)) is None and counting.gets == 2
    assert t.get(("k", 60)) == 60 and counting.gets == 2
    assert [k for k, _ in t.scan(("k",))] == [("k", i) for i in range(50, 100)]
    b.close()


def test_the_read_cache_keeps_the_newest_entries_up_to_its_bound(tmp_path: Path) -> None:
    b = RocksDBBackend(tmp_path, cache_entries=10)
    t = b.table(TableSpec("counts"))
    for i in range(8):
        t.put(("k", i), i)
    t.flush()
    for i in range(8, 14):
        t.put(("k", i), i)
    t.flush()  # 14 cached: the 4 oldest go
    counting = CountingGets(t._cf)
    t._cf = counting
    assert [t.get(("k", i)) for i in range(14)] == list(range(14))
    assert counting.gets == 4
    assert len(t._clean) == 10 and set(t._clean) == set(t._clean_keys)
    b.close()


def test_a_value_the_read_cache_cannot_hold_replaces_its_cached_one(tmp_path: Path) -> None:
    """A counter cached by one flush, then a dict written and flushed: the dict is read
    from RocksDB, never the stale counter."""
    b = RocksDBBackend(tmp_path)
    t = b.table(TableSpec("mixed"))
    t.put(("k",), 7)
    t.flush()
    t.put(("k",), {"n": 8})
    t.flush()
    assert t.get(("k",)) == {"n": 8}
    b.close()


def test_a_ttl_table_keeps_no_read_cache(tmp_path: Path) -> None:
    clock = FakeClock()
    b = RocksDBBackend(tmp_path, clock=clock)
    t = b.table(TableSpec("ttl", ttl=10.0))
    t.put(("k",), 1)
    t.flush()
    clock.now += 11
    assert t.get(("k",)) is None  # expired: a read cache must not resurrect it
    b.close()


def test_range_deletions_drop_exactly_the_cached_entries_they_cover(tmp_path: Path) -> None:
    """Many disjoint range deletions (past the ranges checked lazily), a key written
    again after its range was deleted, and one deleted again: reads equal a model."""
    b = RocksDBBackend(tmp_path, cache_entries=10_000)
    t = b.table(TableSpec("counts"))
    model: dict[tuple[str, int], int] = {}
    for i in range(200):
        t.put(("k", i), i)
        model[("k", i)] = i
    t.flush()
    for r in range(12):  # disjoint ranges [10r, 10r + 5)
        t.delete_range(("k", 10 * r), ("k", 10 * r + 5))
        for i in range(10 * r, 10 * r + 5):
            model.pop(("k", i), None)
        if r == 3:
            t.put(("k", 31), 1031)  # written again after its range went
            model[("k", 31)] = 1031
            t.flush()
    t.put(("k", 150), 7)
    t.flush()
    t.delete_range(("k", 150), ("k", 151))
    model.pop(("k", 150))
    assert {("k", i): t.get(("k", i)) for i in range(200) if t.get(("k", i)) is not None} == model
    assert [k for k, _ in t.scan(("k",))] == sorted(model)
    b.close()


def test_a_background_snapshot_holds_its_state_while_reads_and_writes_go_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The snapshot's thread is held: its cached writes are not in RocksDB yet, reads
    must still see them, later writes must not reach the snapshot, a scan waits."""
    b = RocksDBBackend(tmp_path / "task")
    t, other = b.table(TableSpec("mixed")), b.table(TableSpec("other"))
    t.put(("gone",), 3)
    t.flush()
    t.put(("a",), {"n": 1})  # not a counter: never in the read cache
    t.put(("b",), 5)
    t.delete(("gone",))
    other.put(("x",), [1])
    gate = threading.Event()
    checkpoint, settle = b._checkpoint, b.settle

    def held(*args: Any) -> None:
        assert gate.wait(30)
        checkpoint(*args)

    def opening_settle() -> None:  # whoever waits for the snapshot lets it go on first
        gate.set()
        settle()

    monkeypatch.setattr(b, "_checkpoint", held)
    snap = b.snapshot_sync(1, background=True)
    assert snap.ready is not None and not snap.ready.done()
    assert t.get(("a",)) == {"n": 1} and t.get(("b",)) == 5 and t.get(("gone",)) is None
    assert other.get(("x",)) == [1]
    t.put(("b",), 6)  # the write cache only: nothing waits
    assert t.get(("b",)) == 6 and not snap.ready.done()
    monkeypatch.setattr(b, "settle", opening_settle)
    assert list(other.scan(())) == [(("x",), [1])]  # nothing cached: the scan must wait
    snap.wait_ready()
    shutil.copytree(snap.directory, tmp_path / "copy" / "db")
    copy = RocksDBBackend(tmp_path / "copy")
    assert list(copy.table(TableSpec("mixed")).scan(())) == [(("a",), {"n": 1}), (("b",), 5)]
    assert list(copy.table(TableSpec("other")).scan(())) == [(("x",), [1])]
    copy.close()
    assert list(t.scan(())) == [(("a",), {"n": 1}), (("b",), 6)]
    b.close()
