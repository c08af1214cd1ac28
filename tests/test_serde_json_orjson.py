"""JsonSerde with orjson: exactly the bytes and values of the standard library path.

The reference is what JsonSerde did before orjson: ``json.dumps(v, separators=(",", ":"),
ensure_ascii=False)`` encoded as UTF-8, and ``JSONDecoder().decode`` of the UTF-8 text, each
failure a ``SerdeError`` with the same message. Values are compared by ``repr`` so
that 1 and 1.0, -0.0 and 0.0, and dict key order count.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import json
import math
import uuid
from collections import OrderedDict, namedtuple
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kstream.serde import JsonSerde, SerdeError


def _std_bytes(value: Any) -> tuple[str, Any]:
    try:
        return "ok", json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    except (TypeError, ValueError) as e:
        return "error", f"value is not JSON-serializable: {e}"


def _std_value(data: bytes) -> tuple[str, str]:
    try:
        return "ok", repr(json.JSONDecoder().decode(data.decode("utf-8")))
    except (UnicodeDecodeError, ValueError) as e:
        return "error", f"invalid JSON: {e}"


def _serialized(serde: JsonSerde, value: Any) -> tuple[str, Any]:
    try:
        return "ok", serde.serialize(value)
    except SerdeError as e:
        return "error", str(e)


def _deserialized(serde: JsonSerde, data: bytes) -> tuple[str, str]:
    try:
        return "ok", repr(serde.deserialize(data))
    except SerdeError as e:
        return "error", str(e)


class Int(int):
    def __str__(self) -> str:
        return "not the number"


class Str(str):
    pass


class Float(float):
    def __repr__(self) -> str:
        return "not the number"


class Dict(dict[Any, Any]):
    pass


class List(list[Any]):
    pass


class Color(enum.IntEnum):
    RED = 1


class Ratio(float, enum.Enum):
    UNKNOWN = float("nan")
    FULL = 1.0


class Shade(enum.StrEnum):
    DARK = "dark"


Point = namedtuple("Point", "x y")


@dataclasses.dataclass
class Event:
    user: str


_deep: Any = []
for _ in range(300):  # deeper than orjson writes (254), shallower than the stdlib's limit
    _deep = [_deep]

ENCODE_CASES: list[Any] = [
    {"user": "u123", "kind": "click", "cents": 1250, "ts": 1700000000200},
    {"user": "u123", "kind": "click", "amount": 12.5, "ts": 1700000000200},
    "é", "日本語", "\U0001f600", "\u2028\u2029", "\x00\x01\x1f\x7f", '"\\/\n\t\b\f\r',
    1e16, 1e15, 0.1, 0.30000000000000004, -0.0, 1e-4, 1e-5, 1.5e-7, 1e-9, 1e-10, 1e22,
    5e-324, 1.7976931348623157e308, 2.0**53, 100.0,
    float("nan"), float("inf"), float("-inf"), [1.0, float("nan")], {"x": float("-inf")},
    2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 10**40, [10**30],
    {1: "a"}, {1.5: "a"}, {True: 1, None: 2}, {"a": 1, 2: 3},
    (1, 2), [(1,), {"t": (2, 3)}], Point(1, 2),
    Int(5), [Int(7)], Str("s"), {Str("k"): Str("v")}, Float(2.5), Dict(a=1), List([1]),
    OrderedDict(b=1, a=2), Color.RED, Shade.DARK, True, False, [None], {"n": None}, "null",
    {"a": None, "b": [1.5, None]}, [None, (float("inf"),)], {"k": [None, {"d": float("nan")}]},
    [Ratio.UNKNOWN, None], {"r": Ratio.FULL, "n": None}, ["null", 1e-5], {"null": -0.0},
    "0.00001", "e-1", _deep, [], {}, "",
]  # fmt: skip

REFUSED_CASES: list[Any] = [
    decimal.Decimal("1.5"), Event("u1"), datetime.datetime(2020, 1, 1), datetime.date(2020, 1, 1),
    {1, 2}, b"x", bytearray(b"x"), object(), "\ud800", {"k": "\udfff"}, {(1, 2): 3},
]  # fmt: skip


def _case_id(value: Any) -> str:
    """A test id stable across processes (pytest-xdist workers must collect the same
    ids): an object's repr has its address."""
    return "object()" if type(value) is object else repr(value)


@pytest.mark.parametrize("value", ENCODE_CASES + REFUSED_CASES, ids=_case_id)
def test_serialize_writes_the_standard_librarys_bytes_or_raises_its_error(value: Any) -> None:
    serde = JsonSerde()
    assert _serialized(serde, value) == _std_bytes(value)
    try:
        many: tuple[str, Any] = ("ok", serde.serialize_many([value])[0])
    except SerdeError as e:
        many = ("error", str(e))
    assert many == _std_bytes(value)


def test_the_ordinary_values_are_valid_for_the_standard_library() -> None:
    assert all(_std_bytes(v)[0] == "ok" for v in ENCODE_CASES)
    assert all(_std_bytes(v)[0] == "error" for v in REFUSED_CASES)


def test_serialize_many_of_a_mixed_batch_is_serialize_of_each() -> None:
    serde = JsonSerde()
    values = [*ENCODE_CASES, None, 5, *ENCODE_CASES[::-1]]
    assert serde.serialize_many(values) == [serde.serialize(v) for v in values]
    assert serde.serialize_many(values) == [None if v is None else _std_bytes(v)[1] for v in values]


@pytest.mark.parametrize("bad", REFUSED_CASES, ids=_case_id)
def test_serialize_many_raises_the_first_failing_values_error(bad: Any) -> None:
    serde = JsonSerde()
    with pytest.raises(SerdeError) as e:
        serde.serialize_many([{"a": float("nan")}, 1e-7, {"ok": 1}, bad, decimal.Decimal(1)])
    assert str(e.value) == _std_bytes(bad)[1]
    assert serde.serialize_many([{"a": 1e-7}, {"b": 2}]) == [b'{"a":1e-07}', b'{"b":2}']


def test_enum_members_and_uuids_are_written_as_orjson_writes_them() -> None:
    """The one documented difference: the standard library refuses these."""

    class Plain(enum.Enum):
        A = "a"

    serde = JsonSerde()
    assert serde.serialize({"e": Plain.A}) == b'{"e":"a"}'
    assert serde.serialize(uuid.UUID(int=1)) == b'"00000000-0000-0000-0000-000000000001"'
    # with a part the standard library must write, the whole value is refused as before
    with pytest.raises(SerdeError, match="Plain is not JSON serializable"):
        serde.serialize({"e": Plain.A, "x": 1e-5})
    assert serde.serialize({"e": Plain.A, "x": None}) == b'{"e":"a","x":null}'


@given(st.floats())
def test_every_float_is_written_and_read_as_the_standard_library_does(f: float) -> None:
    serde = JsonSerde()
    data = serde.serialize([f, {"f": f}])
    assert data is not None
    assert data == _std_bytes([f, {"f": f}])[1]
    back = serde.deserialize(data)
    ref = json.loads(data)
    if math.isnan(f):
        assert math.isnan(back[0]) and math.isnan(back[1]["f"])
    else:
        assert repr(back) == repr(ref)


json_text = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=10,
).map(lambda v: json.dumps(v, ensure_ascii=False)) | st.from_regex(
    r"-?(0|[1-9][0-9]{0,30})(\.[0-9]{1,30})?([eE][+-]?[0-9]{1,3})?", fullmatch=True
)


@given(json_text, st.booleans())
def test_any_json_text_is_read_as_the_standard_library_reads_it(text: str, batch: bool) -> None:
    serde = JsonSerde()
    data = text.encode("utf-8", "surrogatepass")
    if batch:
        got = serde.deserialize_many([b"[1]", data])
        assert _std_value(data)[0] == "ok"
        assert repr(got[1]) == _std_value(data)[1]
    else:
        assert _deserialized(serde, data) == _std_value(data)


DECODE_CASES = [
    b"18446744073709551615", b"18446744073709551616", b"-9223372036854775808",
    b"-9223372036854775809", b"-9999999999999999999", b"[12345678901234567890123]",
    b'{"a":-12345678901234567890,"b":1.5}', b"1234567890123456789.5", b"1e400", b"-1e400",
    b"1e-400", b"-1e-400", b"NaN", b"[Infinity,-Infinity]", b"-0", b"-0.0", b"1E5", b"0.1e1",
    b'{"a":1,"b":2,"a":3}', b'"\\ud800"', b'"\\udc00\\ud800x"', b'"\\ud83d\\ude00"',
    b'"\\u0000\\/"', b"\xef\xbb\xbf[1]", b" \t\r\n[1] \n", b"\x0c[1]", b'"\x01"', b'"\x7f"',
    b"[1,]", b"01", b"", b" ", b"nul", b"\xff", b'"\xed\xa0\x80"', b'{"a":1}\x00',
    b"[" * 500 + b"]" * 500, b"\xd9\xa3", b"true", b"null", b"-" + b"9" * 5000,
]  # fmt: skip


@pytest.mark.parametrize("data", DECODE_CASES, ids=lambda d: repr(d[:40]))
def test_deserialize_reads_what_the_standard_library_reads(data: bytes) -> None:
    assert _deserialized(JsonSerde(), data) == _std_value(data)


def test_too_deep_and_too_long_are_refused_as_before() -> None:
    serde = JsonSerde()
    with pytest.raises(SerdeError, match="nested too deeply"):
        serde.deserialize(b"[" * 100_000)
    with pytest.raises(SerdeError, match="integer of 5000 digits"):
        serde.deserialize(b"9" * 5000)
    with pytest.raises(SerdeError, match="Exceeds the limit"):
        serde.deserialize_many([b"[1]", b"-" + b"9" * 5000])


def test_deserialize_many_of_a_mixed_batch_is_deserialize_of_each() -> None:
    serde = JsonSerde()
    good = [d for d in DECODE_CASES if _std_value(d)[0] == "ok"]
    plain = [b'{"user":"u1","amount":12.5}', b"[1,2.5,null]"]
    for batch in (good, plain, [*plain, *good], [*plain, None]):
        got = serde.deserialize_many(batch)
        assert repr(got) == repr([serde.deserialize(d) for d in batch])
        assert repr(got) == repr([None if d is None else json.loads(d) for d in batch])


def test_input_nested_up_to_1024_deep_is_read() -> None:
    """The other documented difference: the standard library's limit was the
    interpreter's recursion limit (about 1 000 levels, less deep in the call stack)."""
    serde = JsonSerde()
    value = serde.deserialize(b"[" * 1024 + b"]" * 1024)
    for _ in range(1023):
        value = value[0]
    assert value == []
    with pytest.raises(SerdeError, match="nested too deeply"):
        serde.deserialize(b"[" * 1025 + b"]" * 1025)


finite_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(st.text(), inner, max_size=3)
    ),
    max_leaves=12,
)


@given(st.lists(finite_values, max_size=6))
def test_values_with_nulls_and_any_floats_are_written_as_the_standard_library_does(
    values: list[Any],
) -> None:
    serde = JsonSerde()
    want = [None if v is None else _std_bytes(v)[1] for v in values]
    assert serde.serialize_many(values) == want
    assert [serde.serialize(v) for v in values] == want


def test_a_null_without_nan_or_infinity_is_left_to_orjson() -> None:
    """The cost: a value with a None is not written twice (orjson, then the stdlib)."""
    serde = JsonSerde()

    def refuse(value: Any) -> bytes:
        raise AssertionError(f"standard library asked for {value!r}")

    serde._serialize_stdlib = refuse  # type: ignore[method-assign]
    value = {"a": None, "b": [1.5, None, (2, "null")], "c": Color.RED}
    assert serde.serialize(value) == _std_bytes(value)[1]
    assert serde.serialize_many([value, None]) == [_std_bytes(value)[1], None]
