"""Avro-typed keyed state (kstream.operators.stateschema): values stored with their
schema version; state written with v1 reads as v2 when compatible, and is refused
naming operator, state and field when not."""

from __future__ import annotations

from typing import Any

import fastavro
import pytest

from kstream.api import MapState, ValueState
from kstream.api.process import StateSpec
from kstream.operators.keyedstate import KeyScope
from kstream.operators.stateschema import StateSchemaError, incompatibility
from kstream.state.memory import MemoryBackend

V1 = {"type": "record", "name": "Tally", "fields": [{"name": "count", "type": "int"}]}
V2 = {
    "type": "record",
    "name": "Tally",
    "fields": [
        {"name": "count", "type": "long"},  # promoted
        {"name": "seen", "type": "int", "default": 0},  # added with a default
    ],
}
V3 = {
    "type": "record",
    "name": "Tally",
    "fields": [{"name": "count", "type": "long"}, {"name": "region", "type": "string"}],
}


def scope(backend: MemoryBackend, schema: Any) -> KeyScope:
    specs: dict[str, StateSpec] = {
        "tally": ValueState(schema=schema),
        "by_day": MapState(schema=schema),
    }
    return KeyScope("op7", backend, specs, operator="tallies")


def test_state_written_with_v1_reads_as_v2() -> None:
    backend = MemoryBackend()
    s = scope(backend, V1)
    s.key = "u1"
    s["tally"].set({"count": 3})
    s["by_day"].put("mon", {"count": 1})
    s2 = scope(backend, V2)  # a restore into the next version of the job
    s2.key = "u1"
    assert s2["tally"].get() == {"count": 3, "seen": 0}
    assert s2["by_day"].items() == [("mon", {"count": 1, "seen": 0})]
    s2["tally"].set({"count": 4, "seen": 1})
    assert s2["tally"].get() == {"count": 4, "seen": 1}
    s2.key = "u2"
    assert s2["tally"].get("none") == "none"


def test_an_incompatible_schema_is_refused_naming_operator_state_and_field() -> None:
    backend = MemoryBackend()
    s = scope(backend, V1)
    s.key = "u1"
    s["tally"].set({"count": 3})
    with pytest.raises(StateSchemaError) as e:
        scope(backend, V3)
    msg = str(e.value)
    assert msg.startswith("operator 'tallies', state 'tally': the restored state holds values")
    assert "field 'region' (string) is new and has no default" in msg


def test_values_must_match_the_schema() -> None:
    s = scope(MemoryBackend(), V1)
    s.key = "u1"
    with pytest.raises(ValueError, match="state 'tally': value does not match its Avro schema"):
        s["tally"].set({"count": "three"})
    with pytest.raises(ValueError, match="not a valid Avro schema"):
        ValueState(schema={"type": "no-such-type"})


def p(schema: Any) -> Any:
    return fastavro.parse_schema(schema)


@pytest.mark.parametrize(
    ("writer", "reader", "why"),
    [
        (V1, V2, None),
        (V2, V1, "count: stored long cannot be read as int"),
        ("int", "double", None),
        ("string", "bytes", None),
        ("string", ["null", "string"], None),
        (["null", "string"], "string", "the value: stored null cannot be read as string"),
        (
            {"type": "enum", "name": "E", "symbols": ["A", "B"]},
            {"type": "enum", "name": "E", "symbols": ["A"]},
            "the value: enum symbols ['B'] are not in the new enum (and it has no default)",
        ),
        (
            {"type": "array", "items": V1},
            {"type": "array", "items": V3},
            "field '[].region' (string) is new and has no default, so stored values cannot be read",
        ),
    ],
)
def test_incompatibility(writer: Any, reader: Any, why: str | None) -> None:
    assert incompatibility(p(writer), p(reader)) == why
