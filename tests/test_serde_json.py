"""JsonSerde: compact JSON both ways, integers included (they take a fast path)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kstream.serde import JsonSerde, SerdeError

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@given(json_values.filter(lambda v: v is not None))  # None is a tombstone
def test_serialize_is_compact_json_and_round_trips(value: Any) -> None:
    serde = JsonSerde()
    data = serde.serialize(value)
    assert data == json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    assert serde.deserialize(data) == value


@given(st.integers())
def test_integers_decode_exactly_as_json(n: int) -> None:
    data = str(n).encode()
    assert JsonSerde().deserialize(data) == json.loads(data) == n


@pytest.mark.parametrize("data", [b"007", b"01", b"", b"12a", b"\xd9\xa3"])
def test_invalid_json_is_rejected(data: bytes) -> None:
    with pytest.raises(SerdeError):
        JsonSerde().deserialize(data)


@pytest.mark.parametrize(
    "text", ['  {"a": 1}', '{"a": 1}\n', " [1, 2] ", '"x"', "-3.5", "Infinity", "true", " 12 "]
)
def test_whitespace_and_scalars_decode_as_json_loads_does(text: str) -> None:
    assert JsonSerde().deserialize(text.encode()) == json.loads(text)


@pytest.mark.parametrize("data", [b'{"a": 1} x', b"[1] [2]", b'{"a": 1', b"   "])
def test_trailing_data_and_truncation_are_rejected(data: bytes) -> None:
    with pytest.raises(SerdeError):
        JsonSerde().deserialize(data)


_shared = JsonSerde()


@given(json_values.filter(lambda v: v is not None))
def test_one_serde_reused_for_many_values_writes_what_json_dumps_writes(value: Any) -> None:
    assert (
        _shared.serialize(value)
        == json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    )


def test_a_failed_serialization_leaves_the_serde_usable() -> None:
    serde = JsonSerde()
    record = {"a": [1, object()]}
    with pytest.raises(SerdeError, match="not JSON serializable"):
        serde.serialize(record)
    record["a"] = [1, 2]  # the same containers, now serializable: not "circular"
    assert serde.serialize(record) == b'{"a":[1,2]}'
    loop: list = []
    loop.append(loop)
    with pytest.raises(SerdeError, match="Circular reference"):
        serde.serialize({"x": loop})
    loop.clear()
    assert serde.serialize({"x": loop}) == b'{"x":[]}'
    with pytest.raises(SerdeError):
        serde.serialize("\ud800")  # a lone surrogate is not UTF-8
    assert (
        serde.serialize({"f": 1.5, "n": float("nan"), "s": "é"})
        == b'{"f":1.5,"n":NaN,"s":"\xc3\xa9"}'
    )
