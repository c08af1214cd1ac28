"""In-memory ``KeyedStateBackend`` for fast tests and benchmarks.

Entries are bucketed by their first key component, with a sorted index of the
first components, so a prefix scan touches one bucket and a range scan only the
buckets in range. ``snapshot()``/``restore()`` copy the whole state (deep copy),
which is what the fast tests use to simulate checkpoint and restore.
"""

from __future__ import annotations

import copy
from bisect import bisect_left, insort
from collections.abc import Iterator
from typing import Any

from kstream.state.base import KeyedStateBackend, StateKey, StateTable, TableSpec

_TYPE_RANK = {type(None): 0, bool: 1, int: 1, float: 1, str: 2, bytes: 3}


def _component_key(c: Any) -> tuple[int, Any]:
    return (_TYPE_RANK.get(type(c), 4), c)


def _tuple_key(k: StateKey) -> tuple[tuple[int, Any], ...]:
    return tuple(_component_key(c) for c in k)


def _sorted_keys(keys: Any) -> list[StateKey]:
    """Keys in tuple order; mixed component types order None < numbers < str < bytes."""
    try:
        return sorted(keys)
    except TypeError:
        return sorted(keys, key=_tuple_key)


class MemoryTable(StateTable):
    """An ordered map held in dicts bucketed by the first key component."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._buckets: dict[Any, dict[StateKey, Any]] = {}
        self._firsts: list[tuple[int, Any]] = []  # sorted (rank, first component)

    def get(self, key: StateKey, default: Any = None) -> Any:
        bucket = self._buckets.get(key[0])
        if bucket is None:
            return default
        return bucket.get(key, default)

    def peek(self, key: StateKey, default: Any = None) -> Any:
        """Two dict reads, each atomic under the GIL (the owner swaps nothing)."""
        return self.get(key, default)

    def put(self, key: StateKey, value: Any) -> None:
        if not key:
            raise ValueError(f"state table {self.name!r}: keys must be non-empty tuples")
        first = key[0]
        bucket = self._buckets.get(first)
        if bucket is None:
            bucket = self._buckets[first] = {}
            insort(self._firsts, _component_key(first))
        bucket[key] = value

    def delete(self, key: StateKey) -> None:
        bucket = self._buckets.get(key[0])
        if bucket is None or key not in bucket:
            return
        del bucket[key]
        if not bucket:
            del self._buckets[key[0]]
            ck = _component_key(key[0])
            del self._firsts[bisect_left(self._firsts, ck)]

    def scan(self, prefix: StateKey = ()) -> Iterator[tuple[StateKey, Any]]:
        if not prefix:
            for _, first in list(self._firsts):
                yield from self._bucket_items(first)
            return
        n = len(prefix)
        for k, v in self._bucket_items(prefix[0]):
            if k[:n] == prefix:
                yield k, v

    def scan_range(self, start: StateKey, end: StateKey) -> Iterator[tuple[StateKey, Any]]:
        lo = bisect_left(self._firsts, _component_key(start[0])) if start else 0
        end_first = _component_key(end[0]) if end else None
        for ck in list(self._firsts[lo:]):
            if end_first is not None and ck > end_first:
                break
            items = self._bucket_items(ck[1])
            try:
                selected = [(k, v) for k, v in items if start <= k < end]
            except TypeError:  # mixed component types: compare by (type rank, value)
                skey, ekey = _tuple_key(start), _tuple_key(end)
                selected = [(k, v) for k, v in items if skey <= _tuple_key(k) < ekey]
            yield from selected

    def _bucket_items(self, first: Any) -> list[tuple[StateKey, Any]]:
        bucket = self._buckets.get(first)
        if not bucket:
            return []
        return [(k, bucket[k]) for k in _sorted_keys(bucket)]

    def __len__(self) -> int:
        return sum(len(b) for b in self._buckets.values())


class MemoryBackend(KeyedStateBackend):
    """All tables of one task in process memory."""

    def __init__(self) -> None:
        self._tables: dict[str, MemoryTable] = {}

    def table(self, spec: TableSpec) -> StateTable:
        t = self._tables.get(spec.name)
        if t is None:
            t = self._tables[spec.name] = MemoryTable(spec.name)
        return t

    def tables(self) -> dict[str, StateTable]:
        return dict(self._tables)

    def snapshot(self) -> dict[str, dict[StateKey, Any]]:
        """A deep copy of every table: ``{table: {key: value}}``."""
        return {
            name: copy.deepcopy({k: v for k, v in t.scan()}) for name, t in self._tables.items()
        }

    @classmethod
    def restore(cls, snapshot: dict[str, dict[StateKey, Any]]) -> MemoryBackend:
        """A backend holding a copy of ``snapshot``."""
        backend = cls()
        for name, entries in snapshot.items():
            t = backend.table(TableSpec(name))
            for k, v in copy.deepcopy(entries).items():
                t.put(k, v)
        return backend
