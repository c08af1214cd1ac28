"""Avro decoding bounded against hostile bytes: a pure-Python walk of a record's body
(no values built) that rejects nesting past ``MAX_DEPTH`` and more than
``MAX_EMPTY_ITEMS`` zero-byte items; see :mod:`kstream.serde.avro` for why."""

from __future__ import annotations

from typing import Any

from kstream.serde.base import SerdeError

__all__ = ["MAX_DEPTH", "MAX_EMPTY_ITEMS", "Walk", "analyse", "check_bounds", "named_types"]

MAX_DEPTH = 64
"""Deepest nesting of records, arrays, maps and unions a record may have (recursive schemas)."""
MAX_EMPTY_ITEMS = 65_536
"""Most items that take zero bytes (e.g. nulls) one record may hold in its arrays."""

_PRIMITIVE_WIDTH = {"boolean": 1, "float": 4, "double": 8}


class Walk:
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


def named_types(schema: Any, out: dict[str, Any]) -> dict[str, Any]:
    """Every named type (record, enum, fixed) defined in ``schema``, by full name."""
    if isinstance(schema, list):
        for s in schema:
            named_types(s, out)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind in ("record", "error", "enum", "fixed") and "name" in schema:
            if schema["name"] in out:
                return out
            out[schema["name"]] = schema
        if kind in ("record", "error"):
            for f in schema.get("fields", ()):
                named_types(f["type"], out)
        elif kind == "array":
            named_types(schema["items"], out)
        elif kind == "map":
            named_types(schema["values"], out)
        elif isinstance(kind, dict | list):
            named_types(kind, out)
    return out


def analyse(schema: Any, named: dict[str, Any]) -> tuple[bool, dict[int, bool]]:
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
    named = named_types(schema, {})
    _recursive, empty = analyse(schema, named)
    Walk(named, empty, data, start).value(schema, 0)
