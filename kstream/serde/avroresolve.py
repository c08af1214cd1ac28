"""Avro schema resolution, checked ahead of reading: may values written with one schema
be read with another (the rules of the Avro specification's "Schema Resolution")?

A field added with a default, a field removed, a promotion (int -> long -> float ->
double, string <-> bytes), enum symbols added, union branches added are compatible;
anything else is not, and :func:`incompatibility` says why, naming the field. Used for
state whose schema evolves across savepoints: at an operator's open
(:mod:`kstream.operators.stateschema`) and in the start-up check of a restore
(:mod:`kstream.plan.compat`).
"""

from __future__ import annotations

from typing import Any

from fastavro.schema import fingerprint, to_parsing_canonical_form

from kstream.serde.avro_bounds import named_types

__all__ = ["incompatibility", "schema_version"]

_PROMOTIONS = {
    "int": {"long", "float", "double"},
    "long": {"float", "double"},
    "float": {"double"},
    "string": {"bytes"},
    "bytes": {"string"},
}


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
    return _Check(named_types(writer, {}), named_types(reader, {})).check(writer, reader, "")


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
