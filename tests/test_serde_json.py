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


# ---- batches (the source's decode and the sink's encode take one call per batch) ----

_RAW_ITEMS = [
    b'{"user":"u1","amount":10.25}', None, b"7", b"-3", b"1e5", b' {"a":1} ', b"[1,2]",
    b"007", b"", b"12a", b"\xd9\xa3", b'{"a":1} x', b"[" * 100_000, b"9" * 5000, b'"text"',
]  # fmt: skip


def _outcome(fn: Any, arg: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(arg)
    except SerdeError as e:
        return "error", str(e)


@pytest.mark.parametrize("data", _RAW_ITEMS)
def test_deserialize_many_gives_what_deserialize_gives_item_by_item(data: bytes | None) -> None:
    serde = JsonSerde()
    good = b'{"k":[1,{"x":null}]}'
    assert _outcome(serde.deserialize_many, [good, data, good]) == (
        ("ok", [{"k": [1, {"x": None}]}, serde.deserialize(data), {"k": [1, {"x": None}]}])
        if _outcome(serde.deserialize, data)[0] == "ok"
        else _outcome(serde.deserialize, data)
    )


@given(st.lists(json_values, max_size=8))
def test_serialize_many_and_deserialize_many_match_one_by_one(values: list[Any]) -> None:
    serde = JsonSerde()
    encoded = serde.serialize_many(values)
    assert encoded == [serde.serialize(v) for v in values]
    assert serde.deserialize_many(encoded) == [serde.deserialize(d) for d in encoded]


def test_serialize_many_raises_as_serialize_and_the_next_batch_is_clean() -> None:
    serde = JsonSerde()
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(SerdeError) as many:
        serde.serialize_many([{"a": 1}, {1, 2}])
    with pytest.raises(SerdeError) as one:
        serde.serialize({1, 2})
    assert str(many.value) == str(one.value)
    with pytest.raises(SerdeError):
        serde.serialize_many([loop])  # circular: the encoder's markers are cleared after it
    assert serde.serialize_many([[1], {"b": [2]}, None, 5]) == [b"[1]", b'{"b":[2]}', None, b"5"]


def test_a_subclass_that_overrides_one_value_is_used_for_batches_too() -> None:
    class Upper(JsonSerde):
        def serialize(self, value: Any) -> bytes | None:
            return super().serialize(value.upper() if isinstance(value, str) else value)

        def deserialize(self, data: bytes | None) -> Any:
            value = super().deserialize(data)
            return value.upper() if isinstance(value, str) else value

    serde = Upper()
    assert serde.serialize_many(["a", 1]) == [b'"A"', b"1"]
    assert serde.deserialize_many([b'"b"', b"2"]) == ["B", 2]
