"""Avro-typed keyed state whose schema evolves across savepoints.

A ``ValueState(schema=...)`` or ``MapState(schema=...)`` of a process function, and
the accumulator of an aggregation given ``schema=...`` (a window's or a rolling
one's, state name ``accumulator``: :class:`VersionedTable`), stores each value as Avro,
tagged with its writer schema's version: the 8-byte CRC-64-AVRO fingerprint of the
schema's parsing canonical form, then the Avro body (base64 in the state table, which
holds JSON). Each writer schema the operator ever used is kept in the operator's
state (``<state id>.schemas``: state name and fingerprint -> schema), so it travels
with every checkpoint and savepoint.

When an operator opens (a start, a restore from a checkpoint or a savepoint of an
older version of the job), every stored writer schema of a state is checked against
the state's schema now (the reader schema) by Avro's resolution rules: a field added
with a default, a field removed, a promotion (int -> long -> float -> double, string
<-> bytes), enum symbols added, union branches added are compatible; values are then
read through schema resolution (:mod:`kstream.serde.avroresolve`). Anything else is
refused before a record is processed, naming the operator, the state and the field
(:class:`StateSchemaError`). The start-up check of a restore compares the same way
the schemas in the checkpoint's operator description (:mod:`kstream.plan.compat`), so
an upgrade is usually refused before the job starts; this check at open also covers
older versions still stored (the schema history).
"""

from __future__ import annotations

import binascii
import io
import json
from collections.abc import Iterator
from typing import Any

import fastavro

from kstream.serde.avroresolve import incompatibility, schema_version
from kstream.state.base import KeyedStateBackend, StateKey, StateTable, TableSpec

__all__ = [
    "ACCUMULATOR",
    "AvroStateCodec",
    "StateSchemaError",
    "StoredDecoder",
    "VersionedTable",
    "incompatibility",
    "schema_version",
]

ACCUMULATOR = "accumulator"  # the state name of an aggregation's accumulator
_FP_BYTES = 8
_MISSING: Any = object()


class StateSchemaError(RuntimeError):
    """Restored state was written with a schema the operator's schema cannot read."""


class AvroStateCodec:
    """Encodes one state's values as versioned Avro and decodes those of any compatible
    stored version; opening it checks (and records) the schema history."""

    def __init__(self, operator: str, state: str, schema_text: str, history: StateTable) -> None:
        self.state = state
        self.reader = fastavro.parse_schema(json.loads(schema_text))
        self.version = schema_version(self.reader)
        self.writers: dict[bytes, Any] = {self.version: None}  # None: written as read
        for (_state, hex_version), text in list(history.scan((state,))):
            version = bytes.fromhex(hex_version)
            if version == self.version:
                continue
            writer = fastavro.parse_schema(json.loads(text))
            why = incompatibility(writer, self.reader)
            if why is not None:
                raise StateSchemaError(
                    f"operator {operator!r}, state {state!r}: the restored state holds values "
                    f"of schema version {hex_version} that this job's schema cannot read: {why}. "
                    "Give the field a default (or keep the old schema), or start without that "
                    "state (a new state name or app id)"
                )
            self.writers[version] = writer
        history.put((state, self.version.hex()), schema_text)

    def encode(self, value: Any) -> str:
        buf = io.BytesIO()
        buf.write(self.version)
        try:
            fastavro.schemaless_writer(buf, self.reader, value)
        except (TypeError, ValueError, KeyError, AttributeError) as e:
            raise ValueError(
                f"state {self.state!r}: value does not match its Avro schema: {e}"
            ) from e
        return binascii.b2a_base64(buf.getvalue(), newline=False).decode("ascii")

    def decode(self, stored: str) -> Any:
        data = binascii.a2b_base64(stored)
        version = data[:_FP_BYTES]
        try:
            writer = self.writers[version]
        except KeyError:
            raise StateSchemaError(
                f"state value of unknown schema version {version.hex()}: its schema is not "
                "in the operator's schema history"
            ) from None
        buf = io.BytesIO(data)
        buf.seek(_FP_BYTES)
        if writer is None:
            return fastavro.schemaless_reader(buf, self.reader, None)
        return fastavro.schemaless_reader(buf, writer, self.reader)


class StoredDecoder:
    """Reads one typed state's stored values as they were written (each with its writer
    schema from the history), without opening the state: no check, nothing written.
    For readers beside the operator (queries). A stored ``[stamp or end, value]`` (a
    TTL entry, a session) has its last item decoded."""

    def __init__(self, history: StateTable, state: str) -> None:
        self.writers = {
            bytes.fromhex(version): fastavro.parse_schema(json.loads(text))
            for (_state, version), text in history.scan((state,))
        }

    def encode(self, value: Any) -> Any:
        raise TypeError("stored values are read-only here")

    def decode(self, stored: Any) -> Any:
        if isinstance(stored, list) and len(stored) == 2 and isinstance(stored[1], str):
            return [stored[0], self.decode(stored[1])]
        if not isinstance(stored, str):
            return stored
        data = binascii.a2b_base64(stored)
        writer = self.writers.get(data[:_FP_BYTES])
        if writer is None:
            return stored  # not a value of a known version: shown as stored
        buf = io.BytesIO(data)
        buf.seek(_FP_BYTES)
        return fastavro.schemaless_reader(buf, writer, None)


class VersionedTable(StateTable):
    """A state table whose values (or, with ``slot``, one item of each stored list)
    are stored as versioned Avro by ``codec``: an aggregation's accumulators given a
    schema. Keys, order and ranges are the wrapped table's."""

    def __init__(
        self, table: StateTable, codec: AvroStateCodec | StoredDecoder, slot: int | None = None
    ) -> None:
        self.name = table.name
        self.table, self.codec, self.slot = table, codec, slot

    @classmethod
    def of(
        cls,
        backend: KeyedStateBackend,
        prefix: str,
        table: str,
        operator: str,
        schema: str | None,
        slot: int | None = None,
    ) -> StateTable:
        """Table ``<prefix>.<table>``, versioned by ``schema`` (as it is without one);
        opening it checks the operator's stored accumulator schemas (``StateSchemaError``)."""
        plain = backend.table(TableSpec(f"{prefix}.{table}"))
        if schema is None:
            return plain
        history = backend.table(TableSpec(f"{prefix}.schemas"))
        return cls(plain, AvroStateCodec(operator, ACCUMULATOR, schema, history), slot)

    def _encode(self, value: Any) -> Any:
        if self.slot is None:
            return self.codec.encode(value)
        out = list(value)
        out[self.slot] = self.codec.encode(out[self.slot])
        return out

    def _decode(self, stored: Any) -> Any:
        if self.slot is None:
            return self.codec.decode(stored)
        out = list(stored)
        out[self.slot] = self.codec.decode(out[self.slot])
        return out

    def get(self, key: StateKey, default: Any = None) -> Any:
        stored = self.table.get(key, _MISSING)
        return default if stored is _MISSING else self._decode(stored)

    def put(self, key: StateKey, value: Any) -> None:
        self.table.put(key, self._encode(value))

    def delete(self, key: StateKey) -> None:
        self.table.delete(key)

    def scan(self, prefix: StateKey = ()) -> Iterator[tuple[StateKey, Any]]:
        return ((k, self._decode(v)) for k, v in self.table.scan(prefix))

    def scan_range(self, start: StateKey, end: StateKey) -> Iterator[tuple[StateKey, Any]]:
        return ((k, self._decode(v)) for k, v in self.table.scan_range(start, end))

    def delete_range(self, start: StateKey, end: StateKey) -> None:
        self.table.delete_range(start, end)
