"""The keyed-state interface shared by every backend (memory, RocksDB).

A task owns one backend. A backend holds named *tables* (one RocksDB column family
each). A table is an ordered map from a key tuple to a Python value:

* key components are ``int``, ``str`` or ``bytes`` (``None`` is allowed too); keys
  order component-wise like Python tuples of the same shape, so a ``scan`` by
  prefix visits, e.g., every window of one key, or every key of one window end, in
  order. Backends that persist encode keys with an order-preserving encoding.
* values are whatever the table's value serde accepts (JSON-compatible values by
  default); backends may keep decoded Python objects in a write cache, so callers
  must not mutate a value after ``put`` and must ``put`` again after changing one
  they got.

Operators build value/map/list/reducing state on top of tables by choosing the
key layout (see ``kstream.state.typed``), so the same operator code runs on every
backend.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kstream.state.localsnapshot import LocalSnapshot

StateKey = tuple[Any, ...]


@dataclass(frozen=True)
class TableSpec:
    """Declaration of one state table.

    ``value_serde`` names how values are stored when persisted ("json" by default;
    "bytes", "str", or an Avro schema via ``kstream.serde``). ``ttl`` (seconds), when
    set, makes entries older than it (by last write, wall clock) disappear.
    """

    name: str
    value_serde: str = "json"
    ttl: float | None = None


class NotNow(Exception):
    """:meth:`StateTable.peek` cannot say now: read under the owner's gate instead."""


class StateTable(ABC):
    """An ordered keyed map; see the module docstring for the contract."""

    name: str

    def peek(self, key: StateKey, default: Any = None) -> Any:
        """``get`` from a thread other than the table's owner, which may be writing it
        meanwhile (queryable state): the value ``key`` had at one moment during the call,
        or NotNow when the table cannot tell without its owner (then read as the owner).
        Changes nothing. Tables that cannot peek say NotNow always."""
        raise NotNow(self.name)

    @abstractmethod
    def get(self, key: StateKey, default: Any = None) -> Any:
        """The value under ``key``, or ``default``."""

    @abstractmethod
    def put(self, key: StateKey, value: Any) -> None:
        """Set ``key`` to ``value`` (visible to the next ``get``/``scan``)."""

    @abstractmethod
    def delete(self, key: StateKey) -> None:
        """Remove ``key`` if present."""

    @abstractmethod
    def scan(self, prefix: StateKey = ()) -> Iterator[tuple[StateKey, Any]]:
        """Entries whose key starts with ``prefix``, in key order.

        The caller may ``put``/``delete`` keys while iterating only after it has
        materialised the iterator (``list(table.scan(...))``).
        """

    @abstractmethod
    def scan_range(self, start: StateKey, end: StateKey) -> Iterator[tuple[StateKey, Any]]:
        """Entries with ``start <= key < end`` (tuple order), in key order."""

    def delete_range(self, start: StateKey, end: StateKey) -> None:
        """Remove every entry with ``start <= key < end`` (backends may do it in one step)."""
        for key, _ in list(self.scan_range(start, end)):
            self.delete(key)


class KeyedStateBackend(ABC):
    """All state of one task: a set of tables."""

    @abstractmethod
    def table(self, spec: TableSpec) -> StateTable:
        """The table declared by ``spec`` (created on first use; same object after)."""

    @abstractmethod
    def tables(self) -> dict[str, StateTable]:
        """Every table opened so far, by name."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (files, handles)."""


class SnapshottingBackend(KeyedStateBackend):
    """A backend whose state a checkpoint can hold: it takes local snapshots, which the
    snapshots package uploads and restores (:mod:`kstream.snapshots`); how it keeps
    its state is its own (RocksDB: :mod:`kstream.state.rocksdb`)."""

    @abstractmethod
    def snapshot_sync(
        self,
        checkpoint_id: int,
        label: str | None = None,
        *,
        background: bool = False,
        deltas: bool = False,
    ) -> LocalSnapshot:
        """The synchronous part of snapshot ``checkpoint_id``: an immutable local snapshot
        (``label`` defaults to ``chk-<checkpoint_id>``); ``background``: its slow part
        runs on a thread (``ready`` is done after it); ``deltas``: it may be a delta of
        the previous one."""
