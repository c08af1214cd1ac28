"""RocksDB keyed state: table contract, write cache, serdes, TTL, persistence."""

from __future__ import annotations

import json
from pathlib import Path

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


typed_ops = st.lists(
    st.tuples(
        st.sampled_from(["value", "map_put", "map_del", "list", "reduce", "clear"]),
        st.one_of(st.none(), st.integers(-5, 5), st.sampled_from(["a", "b"]), st.just(b"k")),
        st.one_of(st.integers(0, 3), st.sampled_from(["x", "y"])),
        st.integers(0, 50),
    ),
    max_size=50,
)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=typed_ops)
def test_typed_state_runs_identically_on_memory_and_rocksdb(
    tmp_path_factory: pytest.TempPathFactory, ops: list
) -> None:
    from kstream.state.memory import MemoryBackend
    from kstream.state.typed import ListState, MapState, ReducingState, ValueState

    backends = [MemoryBackend(), RocksDBBackend(tmp_path_factory.mktemp("db"), cache_entries=3)]
    views = []
    for b in backends:
        views.append(
            (
                ValueState(b.table(TableSpec("value"))),
                MapState(b.table(TableSpec("map"))),
                ListState(b.table(TableSpec("list"))),
                ReducingState(b.table(TableSpec("sum")), lambda a, c: a + c),
            )
        )
    for kind, key, map_key, n in ops:
        for value, mapping, lst, total in views:
            if kind == "value":
                value.set(key, n)
            elif kind == "map_put":
                mapping.put(key, map_key, n)
            elif kind == "map_del":
                mapping.delete(key, map_key)
            elif kind == "list":
                lst.append(key, n)
            elif kind == "reduce":
                total.add(key, n)
            else:
                value.clear(key)
                lst.clear(key)
    mem, rdb = backends
    for name in ("value", "map", "list", "sum"):
        assert list(rdb.table(TableSpec(name)).scan()) == list(mem.table(TableSpec(name)).scan())
    rdb.close()
