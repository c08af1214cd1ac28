"""What a RocksDB table needs of the backend that holds it (:class:`TableHost`), and the
backend's error (:class:`StateError`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import rocksdict

__all__ = ["Clock", "StateError", "TableHost"]

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
