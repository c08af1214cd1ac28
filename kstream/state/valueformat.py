"""How kstream's RocksDB state stores a value.

A stored value is one header byte, an optional 8-byte write time (ms, big-endian;
present when the table had a TTL at write time) and the body::

    header bit 0 (0x01): write time present
    header bit 1 (0x02): value is None, no body
    header bit 2 (0x04): body is an int: big-endian two's complement of 1, 2, 4
                         or 8 bytes (the shortest that holds it; the length says which)
    otherwise:           body is the value serde's bytes

Bit 2 is written only by JSON tables, for values of type ``int`` in int64 range
(counters: the most common state value), and decodes to the same ``int`` the JSON
body would; values written before the flag existed (JSON digits) still decode.
"""

from __future__ import annotations

import json
import struct

from kstream.serde import AvroSerde, Serde, serde_by_name
from kstream.state.base import TableSpec

HAS_TIME = 0x01
IS_NONE = 0x02
IS_INT = 0x04
TIME = struct.Struct(">q")
HEADERS = [bytes([h]) for h in range(256)]

# Compact int bodies: readers by body width in bytes; writers of header + body.
INT_BODIES = {
    n: struct.Struct(">" + c).unpack_from for n, c in ((1, "b"), (2, "h"), (4, "i"), (8, "q"))
}
_INT8, _INT16, _INT32, _INT64 = (struct.Struct(">B" + c).pack for c in "bhiq")
SMALL_INTS = [_INT8(IS_INT, v) for v in range(-0x80, 0x80)]  # index: value + 0x80


def int_value(value: int) -> bytes | None:
    """Header ``IS_INT`` and the shortest body holding ``value``; None beyond int64."""
    if -0x80 <= value < 0x80:
        return _INT8(IS_INT, value)
    if -0x8000 <= value < 0x8000:
        return _INT16(IS_INT, value)
    if -0x8000_0000 <= value < 0x8000_0000:
        return _INT32(IS_INT, value)
    if -0x8000_0000_0000_0000 <= value < 0x8000_0000_0000_0000:
        return _INT64(IS_INT, value)
    return None


def value_serde_for(spec: TableSpec) -> Serde:
    """The serde named by ``spec.value_serde``: "json", "bytes", "str", or an Avro schema as JSON text."""
    name = spec.value_serde
    if name.lstrip().startswith("{"):
        return AvroSerde(json.loads(name))
    return serde_by_name(name)
