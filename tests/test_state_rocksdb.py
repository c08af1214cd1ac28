"""RocksDB keyed state: table contract, write cache, serdes, TTL, persistence (the stored
value format: tests/test_state_value_format.py)."""

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
