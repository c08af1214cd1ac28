"""Serde implementations: bytes, str, JSON (Avro: ``kstream.serde.avro``).

A ``Serde`` turns a Python value into bytes and back. A failure to decode raises
``SerdeError`` with the reason, which sources turn into a dead-letter record;
``SerdeUnavailable`` (a schema registry is down) fails the task instead.
``None`` passes through unchanged in both directions (Kafka null key/value).
"""

from __future__ import annotations

import enum
import json
import math
import re
from collections.abc import Callable, Sequence
from json.encoder import encode_basestring
from json.scanner import make_scanner
from typing import Any

import orjson

_c_make_encoder: Any
try:
    from _json import make_encoder as _c_make_encoder
except ImportError:  # no C accelerator (not CPython): JSONEncoder.encode
    _c_make_encoder = None


class SerdeError(ValueError):
    """Bytes could not be decoded (or a value encoded); the message says why."""


class SerdeUnavailable(RuntimeError):
    """A service the serde needs (a schema registry) cannot be reached or refuses it
    after retries: an outage, never bad data. Sources and sinks let it fail the task
    with the message; no record goes to the dead-letter topic because of it."""


class Serde:
    """Base serde; subclasses implement ``serialize`` and ``deserialize``."""

    name = "serde"

    def serialize(self, value: Any) -> bytes | None:
        raise NotImplementedError

    def deserialize(self, data: bytes | None) -> Any:
        raise NotImplementedError

    def serialize_many(self, values: Sequence[Any]) -> list[bytes | None]:
        """``serialize`` of each value, in order; raises as the first value that fails
        does. Subclasses may encode a batch faster, never differently."""
        serialize = self.serialize
        return [serialize(v) for v in values]

    def deserialize_many(self, items: Sequence[bytes | None]) -> list[Any]:
        """``deserialize`` of each item, in order; raises as the first item that fails
        does. Subclasses may decode a batch faster, never differently."""
        deserialize = self.deserialize
        return [deserialize(x) for x in items]

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class BytesSerde(Serde):
    """Raw bytes, unchanged."""

    name = "bytes"

    def serialize(self, value: Any) -> bytes | None:
        if value is None or isinstance(value, bytes):
            return value
        if isinstance(value, (bytearray, memoryview)):
            return bytes(value)
        raise SerdeError(f"bytes serde needs bytes, got {type(value).__name__}")

    def deserialize(self, data: bytes | None) -> Any:
        return data

    def deserialize_many(self, items: Sequence[bytes | None]) -> list[Any]:
        if type(self).deserialize is not BytesSerde.deserialize:
            return super().deserialize_many(items)  # a subclass decodes its own way
        return list(items)


class StrSerde(Serde):
    """UTF-8 text."""

    name = "str"

    def serialize(self, value: Any) -> bytes | None:
        if value is None:
            return None
        if not isinstance(value, str):
            value = str(value)
        return value.encode("utf-8")

    def deserialize(self, data: bytes | None) -> Any:
        if data is None:
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise SerdeError(f"not valid UTF-8: {e}") from e


class JsonSerde(Serde):
    """Compact JSON (UTF-8): the bytes ``json.dumps(value, separators=(",", ":"),
    ensure_ascii=False)`` writes, decoded as ``json.loads`` decodes them.

    orjson does the work where it gives exactly those bytes and values (the common
    case); everything else (integers beyond 64 bits, NaN and infinities, floats below
    1e-4, non-``str`` dict keys, subclasses of the JSON types, values nested more than
    254 deep, invalid input) goes through the standard library, as it always did.
    Two differences, both values the standard library refuses: ``enum.Enum`` members
    and ``uuid.UUID`` values are written as orjson writes them (the member's value,
    the UUID's canonical text) when no other part of the value needs the standard
    library; and input nested deeper than the interpreter's recursion limit allows
    (about 1 000 levels) but at most 1 024 levels is read (deeper is refused).
    """

    name = "json"

    def __init__(self) -> None:
        self._encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
        # encode() builds this C encoder anew on every call and runs it once; built
        # once here it is the same encoding at half the cost per value. ``markers``
        # detects circular references; an encoding cut short leaves entries behind.
        self._markers: dict[int, Any] = {}
        self._encode_chunks: Callable[[Any, int], Any] | None = None
        if _c_make_encoder is not None:
            self._encode_chunks = _c_make_encoder(
                self._markers,
                self._encoder.default,
                encode_basestring,
                None,
                self._encoder.key_separator,
                self._encoder.item_separator,
                self._encoder.sort_keys,
                self._encoder.skipkeys,
                self._encoder.allow_nan,
            )
        decoder = json.JSONDecoder()
        self._decode = decoder.decode
        # The C scanner parses one value from index 0; decode() adds Python-level
        # whitespace handling around it. Used directly when the value spans the text.
        # (typeshed declares the context argument as the scanner class itself)
        self._scan: Callable[[str, int], tuple[Any, int]] = make_scanner(decoder)  # type: ignore[arg-type]

    def serialize(self, value: Any) -> bytes | None:
        if value is None:
            return None
        if type(value) is int:  # fast path (counters in state): the same bytes as JSON
            return str(value).encode()
        try:
            data = _orjson_dumps(value, option=_ORJSON_OPTIONS)
        except Exception:
            pass  # orjson refuses: the standard library decides (and says why)
        else:
            if not _orjson_differs(data, value):
                return data.decode().encode()  # a compact copy: see _orjson_dumps
        return self._serialize_stdlib(value)

    def _serialize_stdlib(self, value: Any) -> bytes:
        encode_chunks = self._encode_chunks
        try:
            if encode_chunks is None:
                return self._encoder.encode(value).encode("utf-8")
            return "".join(encode_chunks(value, 0)).encode("utf-8")
        except (TypeError, ValueError) as e:
            self._markers.clear()
            raise SerdeError(f"value is not JSON-serializable: {e}") from e
        except BaseException:
            self._markers.clear()  # e.g. RecursionError: the next value starts clean
            raise

    def serialize_many(self, values: Sequence[Any]) -> list[bytes | None]:
        """As ``serialize`` per value, without a method call per value: orjson's bytes
        are checked once per batch (see ``_orjson_differs``); a value orjson refuses
        (or ``None``, or an int) goes through ``serialize`` itself."""
        serialize = self.serialize
        if type(self).serialize is not JsonSerde.serialize:
            return [serialize(v) for v in values]
        dumps, option = _orjson_dumps, _ORJSON_OPTIONS
        out: list[bytes | None] = []
        append = out.append
        fast: list[bytes] = []  # orjson's bytes (out[i] for i in fast_at), not yet checked
        fast_at: list[int] = []
        for value in values:
            if value is None or type(value) is int:
                append(serialize(value))
                continue
            try:
                data = dumps(value, option=option)
            except Exception:
                self._recheck(out, values, fast, fast_at)  # earlier values fail first
                append(serialize(value))  # raises as serialize does
                continue
            data = data.decode().encode()  # a compact copy: see _orjson_dumps
            fast_at.append(len(out))
            fast.append(data)
            append(data)
        self._recheck(out, values, fast, fast_at)
        return out

    def _recheck(
        self, out: list[bytes | None], values: Sequence[Any], fast: list[bytes], fast_at: list[int]
    ) -> None:
        """Replace those of orjson's bytes in ``out`` that may differ from the standard
        library's with the standard library's; one scan of all of them when none may."""
        if fast and _orjson_may_differ(b"\n".join(fast)):
            for i, data in zip(fast_at, fast, strict=True):
                if _orjson_differs(data, values[i]):
                    out[i] = self._serialize_stdlib(values[i])
        fast.clear()
        fast_at.clear()

    def deserialize_many(self, items: Sequence[bytes | None]) -> list[Any]:
        """As ``deserialize`` per item, without a method call per item: when no item has
        a run of 19 digits (one scan of the batch), each item orjson parses is its value;
        any other (``None``, invalid, or any item of a batch with a long number) goes
        through ``deserialize`` itself."""
        deserialize = self.deserialize
        if type(self).deserialize is not JsonSerde.deserialize:
            return super().deserialize_many(items)  # a subclass decodes its own way
        try:
            if _LONG_DIGIT_RUN in b"\n".join(items).translate(_DIGITS_TO_ZERO):  # type: ignore[arg-type]
                return [deserialize(x) for x in items]
        except TypeError:  # a None (or other non-bytes) item
            return [deserialize(x) for x in items]
        loads = _orjson_loads
        out: list[Any] = []
        append = out.append
        for data in items:
            try:
                append(loads(data))  # type: ignore[arg-type]
            except Exception:
                append(deserialize(data))  # raises as deserialize does
        return out

    def deserialize(self, data: bytes | None) -> Any:
        if data is None:
            return None
        if data.isdigit() and (data[0] != 0x30 or len(data) == 1):
            try:
                return int(data)  # fast path: a non-negative JSON integer (no leading zero)
            except ValueError as e:  # more digits than Python converts (4300 by default)
                raise SerdeError(f"invalid JSON: integer of {len(data)} digits: {e}") from e
        try:
            if _LONG_DIGIT_RUN not in data.translate(_DIGITS_TO_ZERO):
                return _orjson_loads(data)
        except Exception:
            pass  # orjson refuses (or data is not bytes): the standard library decides
        try:
            text = data.decode("utf-8")
            try:
                value, end = self._scan(text, 0)
                if end == len(text):
                    return value
            except StopIteration:
                pass  # leading whitespace or invalid: decode() decides
            return self._decode(text)
        except (UnicodeDecodeError, ValueError) as e:
            raise SerdeError(f"invalid JSON: {e}") from e
        except RecursionError as e:
            raise SerdeError(f"invalid JSON: nested too deeply ({len(data)} bytes): {e}") from e


# orjson hands subclasses of str/int/float/dict/list, dataclasses and dates to
# ``default`` with these options; without one it raises, and the standard library
# decides (it writes subclasses as their base type through their own methods, and
# refuses the others).
_ORJSON_OPTIONS = (
    orjson.OPT_PASSTHROUGH_SUBCLASS
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
)
_orjson_dumps = orjson.dumps
# orjson.dumps returns a bytes object shrunk from a larger buffer in place: with glibc
# each one kept about 1-4 KiB of heap however short it was (200 k outputs of ~60 bytes
# held alive: 1.6 GB peak RSS, 33 MB as copies), which an exactly-once sink buffer holds
# for a whole interval. Serialized output is therefore copied (``.decode().encode()``,
# ~0.08 us: the cheapest copy; orjson's output is valid UTF-8).
_orjson_loads = orjson.loads
_SHORT_EXPONENT = re.compile(rb"e-[0-9](?![0-9])")


def _orjson_may_differ(data: bytes) -> bool:
    """Whether orjson's ``data`` may not be the standard library's bytes, from the text
    alone. orjson writes NaN and infinities as ``null`` (the standard library: ``NaN``,
    ``Infinity``) and floats from 1e-9 to below 1e-4 as ``0.00001``, ``1.5e-7`` (the
    standard library: ``1e-05``, ``1.5e-07``); every other float, and everything else
    it writes, is the same text. True also for data that is the same (a ``null`` of a
    None, such text in a string)."""
    return (
        b"null" in data
        or b"0.0000" in data
        or (b"e-" in data and _SHORT_EXPONENT.search(data) is not None)
    )


def _orjson_differs(data: bytes, value: Any) -> bool:
    """``_orjson_may_differ``, with a ``null`` looked into: true only when ``value``
    holds a NaN or an infinity. True also for some data that is the same (such text in
    a string): those values are written by the standard library, at its cost."""
    if b"0.0000" in data or (b"e-" in data and _SHORT_EXPONENT.search(data) is not None):
        return True
    return b"null" in data and _has_nonfinite(value)


def _has_nonfinite(value: Any) -> bool:
    """Whether orjson meets a NaN or an infinity writing ``value``: a ``float`` itself
    or in the dicts, lists, tuples and ``Enum`` values orjson walks (it hands
    subclasses and every other type to the standard library, see ``_ORJSON_OPTIONS``)."""
    t = type(value)
    if t is float:
        return not math.isfinite(value)
    if t is dict:
        value = value.values()
    elif t is not list and t is not tuple:
        return isinstance(value, enum.Enum) and _has_nonfinite(value.value)
    for item in value:  # noqa: SIM110 (any() of a generator costs more per item)
        if _has_nonfinite(item):
            return True
    return False


# orjson reads an integer beyond 64 bits (19 digits or more) as a float; the standard
# library reads it as an int. Such text goes to the standard library; this finds it
# (and, harmlessly, any other run of 19 digits) with one translate and one search.
_DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_DIGIT_RUN = b"0" * 19


def serde_by_name(name: str) -> Serde:
    """The built-in serde called ``name`` ("bytes", "str", "json")."""
    table: dict[str, type[Serde]] = {"bytes": BytesSerde, "str": StrSerde, "json": JsonSerde}
    try:
        return table[name]()
    except KeyError:
        raise ValueError(
            f"unknown serde {name!r}; built-in: {sorted(table)} (Avro needs a schema: AvroSerde(schema))"
        ) from None
