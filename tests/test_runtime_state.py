"""In-memory keyed state backend and typed state helpers."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from kstream.state import TableSpec
from kstream.state.memory import MemoryBackend

keys = st.tuples(st.integers(-5, 5), st.sampled_from(["a", "b", "c"]), st.integers(0, 3))


@given(st.lists(st.tuples(keys, st.booleans())), keys, keys)
def test_memory_table_behaves_like_a_sorted_dict(
    ops: list[tuple[Any, bool]], lo: Any, hi: Any
) -> None:
    table = MemoryBackend().table(TableSpec("t"))
    model: dict = {}
    for k, put in ops:
        if put:
            table.put(k, list(k))
            model[k] = list(k)
        else:
            table.delete(k)
            model.pop(k, None)
    assert list(table.scan()) == sorted(model.items())
    assert list(table.scan((lo[0],))) == sorted((k, v) for k, v in model.items() if k[0] == lo[0])
    assert list(table.scan(lo[:2])) == sorted((k, v) for k, v in model.items() if k[:2] == lo[:2])
    assert list(table.scan_range(lo, hi)) == sorted(
        (k, v) for k, v in model.items() if lo <= k < hi
    )
    assert table.get(lo, "none") == model.get(lo, "none")


def test_mixed_component_types_order_none_numbers_str_bytes() -> None:
    table = MemoryBackend().table(TableSpec("t"))
    for k in [("x", b"b"), ("x", "s"), ("x", None), ("x", 3), (None, 1), (1, 1)]:
        table.put(k, 0)
    assert [k for k, _ in table.scan(("x",))] == [("x", None), ("x", 3), ("x", "s"), ("x", b"b")]
    assert [k for k, _ in table.scan()][:2] == [(None, 1), (1, 1)]


def test_snapshot_is_isolated_and_restorable() -> None:
    backend = MemoryBackend()
    t = backend.table(TableSpec("t"))
    t.put(("k",), [1])
    snap = backend.snapshot()
    t.put(("k",), [2])
    restored = MemoryBackend.restore(snap)
    assert restored.table(TableSpec("t")).get(("k",)) == [1]
    assert set(restored.tables()) == {"t"}
