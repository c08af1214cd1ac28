"""Avro-typed keyed state whose schema evolves across savepoints.

A ``ValueState(schema=...)`` or ``MapState(schema=...)`` stores each value as Avro,
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
read through schema resolution. Anything else is refused before a record is
processed, naming the operator, the state and the field (:class:`StateSchemaError`).
"""

from __future__ import annotations

import binascii
import io
import json
from typing import Any

import fastavro
from fastavro.schema import fingerprint, to_parsing_canonical_form

from kstream.serde.avro import _named
from kstream.state.base import StateTable

__all__ = ["AvroStateCodec", "StateSchemaError", "incompatibility", "schema_version"]

_PROMOTIONS = {
    "int": {"long", "float", "double"},
    "long": {"float", "double"},
    "float": {"double"},
    "string": {"bytes"},
    "bytes": {"string"},
}
_FP_BYTES = 8


class StateSchemaError(RuntimeError):
    """Restored state was written with a schema the operator's schema cannot read."""


def schema_version(parsed: Any) -> bytes:
    """The 8-byte version of a parsed schema: CRC-64-AVRO of its canonical form."""
    return bytes.fromhex(fingerprint(to_parsing_canonical_form(parsed), "CRC-64-AVRO"))


def _kind(s: Any) -> str:
    if isinstance(s, list):
        return "union"
    if isinstance(s, dict):
        t = s["type"]
        return t if isinstance(t, str) else _kind(t)
    return str(s)


def _describe(s: Any) -> str:
    if isinstance(s, dict) and "name" in s:
        return f"{s['type']} {s['name']}"
    if isinstance(s, list):
        return "union [" + ", ".join(_describe(b) for b in s) + "]"
    return _kind(s)


def incompatibility(writer: Any, reader: Any) -> str | None:
    """Why values written with ``writer`` cannot be read as ``reader`` (parsed schemas)
    by Avro schema resolution, naming the field; None when they can."""
    return _Check(_named(writer, {}), _named(reader, {})).check(writer, reader, "")


class _Check:
    def __init__(self, wnamed: dict[str, Any], rnamed: dict[str, Any]) -> None:
        self.wnamed, self.rnamed = wnamed, rnamed
        self.seen: set[tuple[str, str]] = set()

    def check(self, w: Any, r: Any, path: str) -> str | None:
        if isinstance(w, str) and w in self.wnamed:
            w = self.wnamed[w]
        if isinstance(r, str) and r in self.rnamed:
            r = self.rnamed[r]
        where = path or "the value"
        if isinstance(w, list):  # every branch the writer may have written must resolve
            for branch in w:
                why = self.check(branch, r, path)
                if why is not None:
                    return why
            return None
        if isinstance(r, list):
            if any(self.check(w, branch, path) is None for branch in r):
                return None
            return f"{where}: stored {_describe(w)} matches no branch of {_describe(r)}"
        wk, rk = _kind(w), _kind(r)
        if wk != rk:
            if rk in _PROMOTIONS.get(wk, ()):
                return None
            return f"{where}: stored {wk} cannot be read as {rk}"
        if wk == "record":
            return self._record(w, r, path)
        if wk == "enum":
            missing = [s for s in w["symbols"] if s not in r["symbols"]]
            if missing and "default" not in r:
                return f"{where}: enum symbols {missing} are not in the new enum (and it has no default)"
        elif wk == "fixed" and w["size"] != r["size"]:
            return f"{where}: fixed size {w['size']} cannot be read as size {r['size']}"
        elif wk == "array":
            return self.check(w["items"], r["items"], f"{path}[]")
        elif wk == "map":
            return self.check(w["values"], r["values"], f"{path}{{}}")
        return None

    def _record(self, w: dict[str, Any], r: dict[str, Any], path: str) -> str | None:
        pair = (w.get("name", ""), r.get("name", ""))
        if pair in self.seen:  # a recursive record: checked once
            return None
        self.seen.add(pair)
        wfields = {f["name"]: f for f in w["fields"]}
        for f in r["fields"]:
            names = [f["name"], *f.get("aliases", ())]
            wf = next((wfields[n] for n in names if n in wfields), None)
            sub = f"{path}.{f['name']}" if path else f["name"]
            if wf is None:
                if "default" not in f:
                    return (
                        f"field {sub!r} ({_describe(f['type'])}) is new and has no default, "
                        "so stored values cannot be read"
                    )
                continue
            why = self.check(wf["type"], f["type"], sub)
            if why is not None:
                return why
        return None


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
