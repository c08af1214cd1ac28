"""Avro serde (fastavro), with decoding bounded against hostile bytes.

fastavro decodes untrusted bytes fast but trusts two things a record controls:

* **block counts of arrays whose items take no bytes** (``null``, a fixed of size
  0, a record of such fields): a 6-byte record can claim ten million nulls, and
  fastavro allocates them all (a count of 2**62 never ends);
* **nesting of recursive schemas**: fastavro's compiled reader recurses on the C
  stack without a limit — ~100 kB of bytes crash the process (SIGSEGV).

String and bytes lengths are read from an in-memory buffer, so they are bounded by
the record's own size (a length past its end is an error, never an allocation);
items that take at least one byte are bounded the same way.

For a schema with either risk, :class:`AvroSerde` first walks the bytes with
:func:`check_bounds` (pure Python, no values built) and rejects a record nesting
deeper than ``MAX_DEPTH`` or holding more than ``MAX_EMPTY_ITEMS`` zero-byte items;
other schemas pay nothing. Every failure is a ``SerdeError`` naming the reason.
"""

from __future__ import annotations

import io
import struct
from typing import TYPE_CHECKING, Any

import fastavro

from kstream.serde.avro_bounds import (
    MAX_DEPTH,
    MAX_EMPTY_ITEMS,
    Walk,
    analyse,
    check_bounds,
    named_types,
)
from kstream.serde.base import Serde, SerdeError

if TYPE_CHECKING:
    from kstream.serde.registry_avro import RegistryAvroSerde

__all__ = ["MAX_DEPTH", "MAX_EMPTY_ITEMS", "AvroSerde", "check_bounds"]

_CONFLUENT_MAGIC = 0


class AvroSerde(Serde):
    """Avro binary via fastavro, schemaless by default; decoding is bounded (module doc).

    With ``schema_id`` set, uses the Confluent Schema Registry wire format
    (magic byte 0, 4-byte big-endian schema id, then the Avro body) and checks the
    id on read.
    """

    name = "avro"

    def __init__(self, schema: dict[str, Any], schema_id: int | None = None) -> None:
        self.schema = fastavro.parse_schema(schema)
        self.schema_id = schema_id
        self._header = (
            struct.pack(">bI", _CONFLUENT_MAGIC, schema_id) if schema_id is not None else b""
        )
        self._named = named_types(self.schema, {})
        recursive, empty = analyse(self.schema, self._named)
        self._empty = empty
        # Only schemas that fastavro cannot decode safely pay for the walk.
        self._guarded = recursive or any(empty.values())

    @staticmethod
    def registry(url: str | None = None, **options: Any) -> RegistryAvroSerde:
        """Avro through a Confluent-compatible Schema Registry: writers' schemas fetched by
        id and resolved against ``reader_schema``; see :class:`RegistryAvroSerde`
        (``kstream.serde.registry_avro``) for the options."""
        from kstream.serde.registry_avro import RegistryAvroSerde

        return RegistryAvroSerde(url, **options)

    def serialize(self, value: Any) -> bytes | None:
        if value is None:
            return None
        buf = io.BytesIO()
        buf.write(self._header)
        try:
            fastavro.schemaless_writer(buf, self.schema, value)
        except (TypeError, ValueError, KeyError, AttributeError) as e:
            raise SerdeError(f"value does not match the Avro schema: {e}") from e
        return buf.getvalue()

    def deserialize(self, data: bytes | None) -> Any:
        if data is None:
            return None
        buf = io.BytesIO(data)
        if self.schema_id is not None:
            head = buf.read(5)
            if len(head) < 5:
                raise SerdeError("Avro record shorter than the 5-byte wire-format header")
            magic, sid = struct.unpack(">bI", head)
            if magic != _CONFLUENT_MAGIC or sid != self.schema_id:
                raise SerdeError(
                    f"unexpected wire-format header magic={magic} schema_id={sid}, expected schema_id={self.schema_id}"
                )
        if self._guarded:
            Walk(self._named, self._empty, data, buf.tell()).value(self.schema, 0)
        try:
            value = fastavro.schemaless_reader(buf, self.schema, None)
        except Exception as e:  # fastavro raises many kinds on bad bytes; all mean "invalid"
            raise SerdeError(f"invalid Avro data: {type(e).__name__}: {e}") from e
        if buf.tell() != len(data):
            raise SerdeError(f"invalid Avro data: {len(data) - buf.tell()} trailing bytes")
        return value

    def __repr__(self) -> str:
        return f"AvroSerde(schema={self.schema.get('name', '?') if isinstance(self.schema, dict) else '?'})"
