"""What a RocksDB table needs of the backend that holds it (:class:`TableHost`), the
backend's error (:class:`StateError`), and the column family of a table that has none
yet (``NO_CF``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

import rocksdict

__all__ = ["NO_CF", "Clock", "StateError", "TableHost"]

Clock = Callable[[], float]


class StateError(RuntimeError):
    """The state backend cannot do what was asked; the message says what and where."""


class TableHost(Protocol):
    """What a table needs of the backend that holds it (``RocksDBBackend``)."""

    clock: Clock
    cache_entries: int  # each table's write cache holds at most this many entries

    @property
    def logging(self) -> bool:
        """Changes go into the next delta (a base snapshot exists)."""
        ...

    def settle(self) -> None:
        """Wait for a checkpoint being created in the background."""

    def write(self, batch: rocksdict.WriteBatch) -> None:
        """Write ``batch`` to RocksDB, once a background checkpoint has settled."""

    def column_family(self, name: str) -> tuple[rocksdict.Rdict, Any]:
        """Table ``name``'s column family, made now if missing, and its handle."""
        ...


class _NoColumnFamily:
    """The column family of a table that has none yet: empty."""

    def get(self, key: bytes) -> None:
        return None

    def items(self, **_: Any) -> Iterator[tuple[bytes, bytes]]:
        return iter(())


NO_CF: Any = _NoColumnFamily()
