"""JsonSerde: compact JSON both ways, integers included (they take a fast path)."""

from __future__ import annotations

import json

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
def test_serialize_is_compact_json_and_round_trips(value):
    serde = JsonSerde()
    data = serde.serialize(value)
    assert data == json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    assert serde.deserialize(data) == value


@given(st.integers())
def test_integers_decode_exactly_as_json(n):
    data = str(n).encode()
    assert JsonSerde().deserialize(data) == json.loads(data) == n


@pytest.mark.parametrize("data", [b"007", b"01", b"", b"12a", b"\xd9\xa3"])
def test_invalid_json_is_rejected(data):
    with pytest.raises(SerdeError):
        JsonSerde().deserialize(data)


@pytest.mark.parametrize(
    "text", ['  {"a": 1}', '{"a": 1}\n', " [1, 2] ", '"x"', "-3.5", "Infinity", "true", " 12 "]
)
def test_whitespace_and_scalars_decode_as_json_loads_does(text):
    assert JsonSerde().deserialize(text.encode()) == json.loads(text)


@pytest.mark.parametrize("data", [b'{"a": 1} x', b"[1] [2]", b'{"a": 1', b"   "])
def test_trailing_data_and_truncation_are_rejected(data):
    with pytest.raises(SerdeError):
        JsonSerde().deserialize(data)
