"""Value, map, list and reducing state over one ``StateTable``.

Each helper fixes a key layout so operator code stays backend-independent:
value ``(key,)``, map ``(key, map_key)``, list ``(key,)`` holding a JSON list,
reducing ``(key,)`` folded with a function. Values must be JSON-compatible.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from kstream.state.base import StateTable


class ValueState:
    """One value per key."""

    def __init__(self, table: StateTable) -> None:
        self.table = table

    def get(self, key: Any, default: Any = None) -> Any:
        return self.table.get((key,), default)

    def set(self, key: Any, value: Any) -> None:
        self.table.put((key,), value)

    def clear(self, key: Any) -> None:
        self.table.delete((key,))


class MapState:
    """A map per key, scanned in map-key order."""

    def __init__(self, table: StateTable) -> None:
        self.table = table

    def get(self, key: Any, map_key: Any, default: Any = None) -> Any:
        return self.table.get((key, map_key), default)

    def put(self, key: Any, map_key: Any, value: Any) -> None:
        self.table.put((key, map_key), value)

    def delete(self, key: Any, map_key: Any) -> None:
        self.table.delete((key, map_key))

    def items(self, key: Any) -> Iterator[tuple[Any, Any]]:
        for k, v in self.table.scan((key,)):
            yield k[1], v


class ListState:
    """An append-only list per key (stored as one JSON list)."""

    def __init__(self, table: StateTable) -> None:
        self.table = table

    def get(self, key: Any) -> list[Any]:
        return list(self.table.get((key,), []))

    def append(self, key: Any, value: Any) -> None:
        self.table.put((key,), [*self.table.get((key,), []), value])

    def clear(self, key: Any) -> None:
        self.table.delete((key,))


class ReducingState:
    """A value per key folded with ``reduce(acc, value)``."""

    def __init__(self, table: StateTable, reduce: Callable[[Any, Any], Any]) -> None:
        self.table = table
        self.reduce = reduce

    def get(self, key: Any, default: Any = None) -> Any:
        return self.table.get((key,), default)

    def add(self, key: Any, value: Any) -> Any:
        """Fold ``value`` in and return the new accumulator."""
        missing = object()
        acc = self.table.get((key,), missing)
        acc = value if acc is missing else self.reduce(acc, value)
        self.table.put((key,), acc)
        return acc
