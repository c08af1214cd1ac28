"""Order-preserving encoding of state key tuples to bytes.

``encode_key(a) < encode_key(b)`` (bytewise) exactly when ``a < b`` as Python
tuples, for tuples whose components at each position have the same type (Python
cannot order mixed types; the encoding orders them by type, ``None < int < str <
bytes``, as the memory backend does). The encoding of a tuple is the
concatenation of its components' encodings, and each component encoding is
self-delimiting, so the encoding of a prefix tuple is a byte prefix of the
encoding of every tuple that starts with it: a RocksDB ``seek`` + ``startswith``
visits exactly the keys under a tuple prefix (all windows of one key, all keys of
one window end).

Component layout (first byte is a type tag):

* ``None``: ``0x01``
* ``int`` in int64 range: ``0x03`` + 8 bytes big-endian of ``n + 2**63``
* ``int`` >= 2**63: ``0x04`` + length byte ``L`` + ``L`` bytes big-endian magnitude
* ``int`` < -2**63: ``0x02`` + ``255 - L`` + ``L`` bytes of the inverted magnitude
  (longer magnitude means smaller number; inverted bytes reverse the order)
* ``str``: ``0x05`` + UTF-8 (``surrogatepass``) with ``0x00`` escaped as ``0x00 0xFF``,
  then ``0x00 0x01`` (UTF-8 byte order is code-point order, Python's ``str`` order)
* ``bytes``: ``0x06`` + bytes escaped and terminated like ``str``

``bool`` is encoded as the ``int`` it equals. Ints need at most 255 bytes.
"""

from __future__ import annotations

import struct
from typing import Any

from kstream.state.base import StateKey

_NONE = 0x01
_NEG_BIG = 0x02
_INT64 = 0x03
_POS_BIG = 0x04
_STR = 0x05
_BYTES = 0x06
_ESCAPED = frozenset({_STR, _BYTES})
_BIG_INTS = frozenset({_POS_BIG, _NEG_BIG})

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_TERMINATOR = b"\x00\x01"


class KeyEncodingError(ValueError):
    """A key component cannot be encoded or bytes are not a valid encoded key."""


def _escape(data: bytes) -> bytes:
    return data.replace(b"\x00", b"\x00\xff") + _TERMINATOR


def _encode_component(part: Any, out: bytearray) -> None:
    if part is None:
        out.append(_NONE)
    elif isinstance(part, int):
        if _INT64_MIN <= part <= _INT64_MAX:
            out.append(_INT64)
            out += (part - _INT64_MIN).to_bytes(8, "big")
        elif part > 0:
            n = (part.bit_length() + 7) // 8
            if n > 255:
                raise KeyEncodingError(f"int key component too large ({n} bytes > 255)")
            out.append(_POS_BIG)
            out.append(n)
            out += part.to_bytes(n, "big")
        else:
            mag = -part
            n = (mag.bit_length() + 7) // 8
            if n > 255:
                raise KeyEncodingError(f"int key component too small ({n} bytes > 255)")
            out.append(_NEG_BIG)
            out.append(255 - n)
            out += ((1 << (8 * n)) - 1 - mag).to_bytes(n, "big")
    elif isinstance(part, bytes):
        out.append(_BYTES)
        out += _escape(part)
    elif isinstance(part, str):
        out.append(_STR)
        out += _escape(part.encode("utf-8", "surrogatepass"))
    else:
        raise KeyEncodingError(
            f"key components must be int, str, bytes or None, got {type(part).__name__}: {part!r}"
        )


_pack_u64 = struct.Struct(">BQ").pack
_unpack_u64 = struct.Struct(">Q").unpack_from
_unpack_two_u64 = struct.Struct(">xQxQ").unpack_from  # tag, int64, tag, int64


def encode_key(key: StateKey) -> bytes:
    """The order-preserving encoding of ``key`` (see module docstring)."""
    # Inline the common components (int64, exact str / bytes); everything else,
    # bool and subclasses included, takes the general path with the same result.
    out: list[bytes] = []
    for part in key:
        t = type(part)
        if t is int:
            try:  # the offset int64 fits an unsigned 64-bit field, else struct.error
                out.append(_pack_u64(_INT64, part - _INT64_MIN))
                continue
            except struct.error:
                pass  # outside int64: the general path below
        elif t is bytes:
            out.append(b"\x06" + part.replace(b"\x00", b"\x00\xff") + _TERMINATOR)
            continue
        elif t is str:
            data = part.encode("utf-8", "surrogatepass")
            out.append(b"\x05" + data.replace(b"\x00", b"\x00\xff") + _TERMINATOR)
            continue
        buf = bytearray()
        _encode_component(part, buf)
        out.append(bytes(buf))
    return b"".join(out)


def _unescape(data: bytes, pos: int) -> tuple[bytes, int]:
    """The escaped bytes component starting at ``pos`` and the position after it."""
    out = bytearray()
    while True:
        i = data.find(b"\x00", pos)
        if i < 0 or i + 1 >= len(data):
            raise KeyEncodingError(f"unterminated bytes component in encoded key {data!r}")
        out += data[pos:i]
        marker = data[i + 1]
        if marker == 0x01:
            return bytes(out), i + 2
        if marker != 0xFF:
            raise KeyEncodingError(f"bad escape 0x00 0x{marker:02x} in encoded key {data!r}")
        out.append(0)
        pos = i + 2


def _decode_big_int(tag: int, data: bytes, pos: int) -> tuple[int, int]:
    """The int beyond int64 whose length byte is at ``pos``, and the position after it."""
    if tag == _POS_BIG:
        n = data[pos]
        return int.from_bytes(data[pos + 1 : pos + 1 + n], "big"), pos + 1 + n
    n = 255 - data[pos]
    inv = int.from_bytes(data[pos + 1 : pos + 1 + n], "big")
    return -((1 << (8 * n)) - 1 - inv), pos + 1 + n


def decode_key(data: bytes) -> StateKey:
    """The tuple ``encode_key`` turned into ``data``; KeyEncodingError if malformed."""
    # Hot in every scan. (int64, int64, str | bytes without a zero byte) — a window
    # accumulator (end, start, key) — is decoded in one piece: both ints with one
    # unpack, the last component as one slice (its first zero byte is the terminator).
    end = len(data)
    if (
        end >= 21
        and data[0] == _INT64
        and data[9] == _INT64
        and data[18] in _ESCAPED
        and data[-1] == 0x01
        and data.find(b"\x00", 19) == end - 2
    ):
        a, b = _unpack_two_u64(data)
        raw = data[19:-2]
        last = raw if data[18] == _BYTES else raw.decode("utf-8", "surrogatepass")
        return (a + _INT64_MIN, b + _INT64_MIN, last)
    # Otherwise component by component: int64 and unescaped str / bytes inline;
    # escapes, big ints and None leave the fast path.
    parts: list[Any] = []
    append = parts.append
    pos = 0
    try:
        while pos < end:
            tag = data[pos]
            if tag == _INT64:
                append(_unpack_u64(data, pos + 1)[0] + _INT64_MIN)
                pos += 9
            elif tag in _ESCAPED:
                i = data.find(b"\x00", pos + 1)
                if 0 <= i < end - 1 and data[i + 1] == 0x01:
                    raw, pos = data[pos + 1 : i], i + 2  # no escaped zero byte: a slice
                else:
                    raw, pos = _unescape(data, pos + 1)
                append(raw if tag == _BYTES else raw.decode("utf-8", "surrogatepass"))
            elif tag == _NONE:
                append(None)
                pos += 1
            elif tag in _BIG_INTS:
                n, pos = _decode_big_int(tag, data, pos + 1)
                append(n)
            else:
                raise KeyEncodingError(f"unknown type tag 0x{tag:02x} in encoded key {data!r}")
    except (IndexError, struct.error) as e:
        raise KeyEncodingError(f"truncated encoded key {data!r}") from e
    if pos != end:
        raise KeyEncodingError(f"truncated encoded key {data!r}")
    return tuple(parts)


def prefix_upper_bound(prefix: bytes) -> bytes | None:
    """The smallest byte string greater than every string starting with ``prefix``.

    ``None`` when there is none (empty prefix or all ``0xFF``): scan to the end.
    """
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])
