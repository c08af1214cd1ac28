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

from kstream.serde.base import Serde, SerdeError

if TYPE_CHECKING:
    from kstream.serde.registry_avro import RegistryAvroSerde

__all__ = ["MAX_DEPTH", "MAX_EMPTY_ITEMS", "AvroSerde", "check_bounds"]

MAX_DEPTH = 64
"""Deepest nesting of records, arrays, maps and unions a record may have (recursive schemas)."""
MAX_EMPTY_ITEMS = 65_536
"""Most items that take zero bytes (e.g. nulls) one record may hold in its arrays."""

_CONFLUENT_MAGIC = 0
_PRIMITIVE_WIDTH = {"boolean": 1, "float": 4, "double": 8}


class _Walk:
    """A bounds check of one Avro body: positions only, no values."""

    def __init__(self, named: dict[str, Any], empty: dict[int, bool], data: bytes, pos: int):
        self.named, self.empty, self.data, self.pos = named, empty, data, pos
        self.empty_items = 0

    def long(self) -> int:
        data, pos, shift, acc = self.data, self.pos, 0, 0
        while True:
            if pos >= len(data):
                raise SerdeError("invalid Avro data: truncated varint")
            b = data[pos]
            pos += 1
            acc |= (b & 0x7F) << shift
            if not b & 0x80:
                break
            shift += 7
            if shift > 63:
                raise SerdeError("invalid Avro data: varint longer than 10 bytes")
        self.pos = pos
        return (acc >> 1) ^ -(acc & 1)

    def skip(self, n: int, what: str) -> None:
        if n < 0 or n > len(self.data) - self.pos:
            raise SerdeError(
                f"invalid Avro data: {what} of {n} bytes, {len(self.data) - self.pos} left"
            )
        self.pos += n

    def value(self, schema: Any, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise SerdeError(f"invalid Avro data: nested deeper than {MAX_DEPTH} levels")
        if isinstance(schema, str):
            if schema in ("null",):
                return
            if schema in _PRIMITIVE_WIDTH:
                self.skip(_PRIMITIVE_WIDTH[schema], schema)
            elif schema in ("int", "long"):
                self.long()
            elif schema in ("string", "bytes"):
                self.skip(self.long(), f"{schema} length")
            else:
                self.value(self.named[schema], depth)
            return
        if isinstance(schema, list):
            index = self.long()
            if not 0 <= index < len(schema):
                raise SerdeError(f"invalid Avro data: union branch {index} of {len(schema)}")
            self.value(schema[index], depth + 1)
            return
        kind = schema["type"]
        if kind == "record" or kind == "error":
            for f in schema["fields"]:
                self.value(f["type"], depth + 1)
        elif kind == "enum":
            self.long()
        elif kind == "fixed":
            self.skip(int(schema["size"]), "fixed")
        elif kind == "array" or kind == "map":
            self.blocks(schema, depth + 1)
        else:  # a primitive with a logical type, {"type": "long", ...}
            self.value(kind, depth)

    def blocks(self, schema: Any, depth: int) -> None:
        items = schema["items"] if schema["type"] == "array" else schema["values"]
        is_map = schema["type"] == "map"
        empty = not is_map and self.empty.get(id(schema), True)
        while True:
            count = self.long()
            if count == 0:
                return
            if count < 0:
                count = -count
                self.long()  # the block's size in bytes
            if empty:
                self.empty_items += count
                if self.empty_items > MAX_EMPTY_ITEMS:
                    raise SerdeError(
                        f"invalid Avro data: more than {MAX_EMPTY_ITEMS} zero-byte array items"
                    )
            elif count > len(self.data) - self.pos:
                raise SerdeError(
                    f"invalid Avro data: block of {count} items, "
                    f"{len(self.data) - self.pos} bytes left"
                )
            for _ in range(count):
                if is_map:
                    self.skip(self.long(), "map key length")
                self.value(items, depth)


def _named(schema: Any, out: dict[str, Any]) -> dict[str, Any]:
    """Every named type (record, enum, fixed) defined in ``schema``, by full name."""
    if isinstance(schema, list):
        for s in schema:
            _named(s, out)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind in ("record", "error", "enum", "fixed") and "name" in schema:
            if schema["name"] in out:
                return out
            out[schema["name"]] = schema
        if kind in ("record", "error"):
            for f in schema.get("fields", ()):
                _named(f["type"], out)
        elif kind == "array":
            _named(schema["items"], out)
        elif kind == "map":
            _named(schema["values"], out)
        elif isinstance(kind, dict | list):
            _named(kind, out)
    return out


def _analyse(schema: Any, named: dict[str, Any]) -> tuple[bool, dict[int, bool]]:
    """(whether ``schema`` is recursive, per array schema id whether its items can take
    zero bytes)."""
    empty_arrays: dict[int, bool] = {}
    recursive = False

    def zero_width(s: Any, stack: tuple[str, ...]) -> bool:
        nonlocal recursive
        if isinstance(s, str):
            if s == "null":
                return True
            if s in named:
                if s in stack:
                    recursive = True
                    return False
                return zero_width(named[s], (*stack, s))
            return False
        if isinstance(s, list):
            for branch in s:
                zero_width(branch, stack)
            return False  # a union index takes a byte
        kind = s["type"]
        name = s.get("name")
        if kind in ("record", "error"):
            inner = (*stack, name) if name else stack
            widths = [zero_width(f["type"], inner) for f in s["fields"]]
            return all(widths)
        if kind == "fixed":
            return int(s["size"]) == 0
        if kind == "array":
            empty_arrays[id(s)] = zero_width(s["items"], stack)
            return False
        if kind == "map":
            zero_width(s["values"], stack)
            return False
        if isinstance(kind, str) and kind in named:
            return zero_width(kind, stack)
        if isinstance(kind, dict | list):
            return zero_width(kind, stack)
        return kind == "null"

    zero_width(schema, ())
    return recursive, empty_arrays


def check_bounds(schema: Any, data: bytes, start: int = 0) -> None:
    """SerdeError unless the Avro body of ``schema`` at ``data[start:]`` stays within
    ``MAX_DEPTH`` and ``MAX_EMPTY_ITEMS`` and within the record's bytes."""
    named = _named(schema, {})
    _recursive, empty = _analyse(schema, named)
    _Walk(named, empty, data, start).value(schema, 0)


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
        self._named = _named(self.schema, {})
        recursive, empty = _analyse(self.schema, self._named)
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
            _Walk(self._named, self._empty, data, buf.tell()).value(self.schema, 0)
        try:
            value = fastavro.schemaless_reader(buf, self.schema, None)
        except Exception as e:  # fastavro raises many kinds on bad bytes; all mean "invalid"
            raise SerdeError(f"invalid Avro data: {type(e).__name__}: {e}") from e
        if buf.tell() != len(data):
            raise SerdeError(f"invalid Avro data: {len(data) - buf.tell()} trailing bytes")
        return value

    def __repr__(self) -> str:
        return f"AvroSerde(schema={self.schema.get('name', '?') if isinstance(self.schema, dict) else '?'})"
