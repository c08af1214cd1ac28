"""Serde implementations: bytes, str, JSON (Avro: ``kstream.serde.avro``).

A ``Serde`` turns a Python value into bytes and back. A failure to decode raises
``SerdeError`` with the reason, which sources turn into a dead-letter record.
``None`` passes through unchanged in both directions (Kafka null key/value).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from json.encoder import encode_basestring
from json.scanner import make_scanner
from typing import Any

_c_make_encoder: Any
try:
    from _json import make_encoder as _c_make_encoder
except ImportError:  # no C accelerator (not CPython): JSONEncoder.encode
    _c_make_encoder = None


class SerdeError(ValueError):
    """Bytes could not be decoded (or a value encoded); the message says why."""


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
    """Compact JSON (UTF-8)."""

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
        """As ``serialize`` per value, without a method call per value; a value that
        fails (or is ``None`` or an int) goes through ``serialize`` itself."""
        encode_chunks = self._encode_chunks
        serialize = self.serialize
        if encode_chunks is None or type(self).serialize is not JsonSerde.serialize:
            return [serialize(v) for v in values]
        join = "".join
        out: list[bytes | None] = []
        append = out.append
        for value in values:
            if value is None or type(value) is int:
                append(serialize(value))
                continue
            try:
                append(join(encode_chunks(value, 0)).encode("utf-8"))
            except Exception:
                self._markers.clear()
                append(serialize(value))  # raises as serialize does
            except BaseException:
                self._markers.clear()
                raise
        return out

    def deserialize_many(self, items: Sequence[bytes | None]) -> list[Any]:
        """As ``deserialize`` per item, without a method call per item: an item the C
        scanner parses whole is its value; any other (``None``, whitespace around the
        value, trailing data, invalid) goes through ``deserialize`` itself."""
        scan, deserialize = self._scan, self.deserialize
        if type(self).deserialize is not JsonSerde.deserialize:
            return super().deserialize_many(items)  # a subclass decodes its own way
        out: list[Any] = []
        append = out.append
        for data in items:
            try:
                text = data.decode("utf-8")  # type: ignore[union-attr]
                value, end = scan(text, 0)
            except Exception:
                append(deserialize(data))  # raises as deserialize does
                continue
            append(value if end == len(text) else deserialize(data))
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


def serde_by_name(name: str) -> Serde:
    """The built-in serde called ``name`` ("bytes", "str", "json")."""
    table: dict[str, type[Serde]] = {"bytes": BytesSerde, "str": StrSerde, "json": JsonSerde}
    try:
        return table[name]()
    except KeyError:
        raise ValueError(
            f"unknown serde {name!r}; built-in: {sorted(table)} (Avro needs a schema: AvroSerde(schema))"
        ) from None
