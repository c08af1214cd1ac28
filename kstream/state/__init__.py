"""Keyed operator state: the interface the runtime uses and its backends."""

from kstream.state.base import KeyedStateBackend, StateKey, StateTable, TableSpec

__all__ = ["KeyedStateBackend", "StateKey", "StateTable", "TableSpec"]
