"""The bad-record path cannot fail: serdes bounded and fuzzed, extractor results checked."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kstream.api.time import MAX_TIMESTAMP
from kstream.elements.reader import Reader
from kstream.serde import AvroSerde, BytesSerde, JsonSerde, Serde, SerdeError, StrSerde
from kstream.serde.avro import MAX_DEPTH, MAX_EMPTY_ITEMS

LINKED = {"type": "record", "name": "Node", "fields": [{"name": "next", "type": ["null", "Node"]}]}
SCHEMAS: list[Any] = [
    {"type": "array", "items": "null"},
    LINKED,
    {
        "type": "record",
        "name": "Order",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "user", "type": "string"},
            {"name": "tags", "type": {"type": "map", "values": "bytes"}},
            {"name": "items", "type": {"type": "array", "items": "double"}},
            {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
            {"name": "id2", "type": {"type": "fixed", "name": "Id", "size": 4}},
            {"name": "opt", "type": ["null", "boolean", "float"]},
            {
                "name": "empties",
                "type": {
                    "type": "array",
                    "items": {
                        "type": "record",
                        "name": "E",
                        "fields": [{"name": "n", "type": "null"}],
                    },
                },
            },
        ],
    },
]
SERDES: list[Serde] = [
    BytesSerde(),
    StrSerde(),
    JsonSerde(),
    *[AvroSerde(s) for s in SCHEMAS],
    AvroSerde(LINKED, schema_id=7),
]


def zigzag(n: int) -> bytes:
    """Avro's variable-length zig-zag encoding of ``n``."""
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


@pytest.mark.parametrize("serde", SERDES, ids=repr)
@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=200))
def test_every_serde_decodes_or_raises_serde_error(serde: Serde, data: bytes) -> None:
    with contextlib.suppress(SerdeError):
        serde.deserialize(data)


@pytest.mark.parametrize("serde", SERDES, ids=repr)
@settings(max_examples=100, deadline=None)
@given(items=st.lists(st.none() | st.binary(max_size=40), max_size=6))
def test_every_serde_decodes_a_batch_as_it_decodes_each_record(
    serde: Serde, items: list[bytes | None]
) -> None:
    one: list[Any] = []
    try:
        one = [serde.deserialize(x) for x in items]
    except SerdeError:
        with pytest.raises(SerdeError):
            serde.deserialize_many(items)
        return
    assert serde.deserialize_many(items) == one


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=60))
def test_avro_walk_agrees_with_fastavro_on_valid_records(data: bytes) -> None:
    """A record the bounds check lets through is exactly what fastavro decodes alone."""
    serde = AvroSerde(SCHEMAS[2])
    try:
        value = serde.deserialize(data)
    except SerdeError:
        return
    assert serde.deserialize(serde.serialize(value)) == value


def test_a_six_byte_avro_record_cannot_claim_ten_million_nulls() -> None:
    data = zigzag(10_000_000) + zigzag(0)
    assert len(data) <= 6
    with pytest.raises(SerdeError, match=f"more than {MAX_EMPTY_ITEMS} zero-byte array items"):
        AvroSerde({"type": "array", "items": "null"}).deserialize(data)
    assert (
        AvroSerde({"type": "array", "items": "null"}).deserialize(zigzag(3) + zigzag(0))
        == [None] * 3
    )


def test_deep_recursive_avro_is_refused_not_a_crash() -> None:
    # fastavro alone crashes the process (SIGSEGV) on this: it recurses on the C stack.
    with pytest.raises(SerdeError, match=f"nested deeper than {MAX_DEPTH} levels"):
        AvroSerde(LINKED).deserialize(b"\x02" * 100_000 + b"\x00")
    assert AvroSerde(LINKED).deserialize(b"\x02\x02\x00") == {"next": {"next": {"next": None}}}


def test_avro_string_length_past_the_record_is_refused() -> None:
    schema = {"type": "record", "name": "S", "fields": [{"name": "s", "type": "string"}]}
    with pytest.raises(SerdeError, match="invalid Avro data"):
        AvroSerde(schema).deserialize(zigzag(10**15) + b"abc")


def test_json_deep_nesting_and_huge_integers_are_decoding_errors() -> None:
    with pytest.raises(SerdeError, match="nested too deeply"):
        JsonSerde().deserialize(b"[" * 100_000)
    with pytest.raises(SerdeError, match="integer of 5000 digits"):
        JsonSerde().deserialize(b"7" * 5000)
    with pytest.raises(SerdeError, match="invalid JSON: Exceeds the limit"):
        JsonSerde().deserialize(b"[" + b"7" * 5000 + b"]")


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no")


def raise_recursion(value: Any, ts: int) -> int:
    return raise_recursion(value, ts)


def extractor_of(value: Any, ts: int) -> Any:
    kind = value["kind"]
    if kind == "ok":
        return value["t"]
    if kind == "runtime":
        raise RuntimeError("boom")
    if kind == "unprintable":
        raise Unprintable()
    if kind == "deep":
        return raise_recursion(value, ts)
    return {"none": None, "str": "12", "float": 1.5, "huge": 10**20, "neg": -5, "bool": True}[kind]


def test_every_extractor_failure_and_bad_result_is_a_failure_with_its_reason() -> None:
    reader = Reader(None, BytesSerde(), JsonSerde(), extractor_of)
    kinds = ["ok", "runtime", "unprintable", "deep", "none", "str", "float", "huge", "neg", "bool"]
    raw = [(b"k", f'{{"kind":"{k}","t":{i}}}'.encode(), 100 + i) for i, k in enumerate(kinds)]
    raw.append((b"k", b'{"kind":"ok","t":9223372036854775807}', 1))
    raw.append((b"k", b"{bad", 1))
    keys, values, stamps, failures = reader.decode(raw)
    assert stamps == [0, MAX_TIMESTAMP]
    assert len(keys) == len(values) == 2
    reasons = dict(failures)
    rng = f"not an int within Kafka's timestamp range [0, {MAX_TIMESTAMP}]"
    assert reasons == {
        1: "timestamp extractor failed: RuntimeError: boom",
        2: "timestamp extractor failed: Unprintable (its message could not be formatted)",
        3: reasons[3],
        4: f"timestamp extractor returned None: {rng}",
        5: f"timestamp extractor returned '12': {rng}",
        6: f"timestamp extractor returned 1.5: {rng}",
        7: f"timestamp extractor returned {10**20}: {rng}",
        8: f"timestamp extractor returned -5: {rng}",
        9: f"timestamp extractor returned True: {rng}",
        11: "invalid JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
    }
    assert reasons[3].startswith("timestamp extractor failed: RecursionError: maximum recursion")


def test_a_serde_raising_anything_is_a_failure_and_kafka_timestamps_are_checked() -> None:
    class Broken(Serde):
        name = "broken"

        def deserialize(self, data: bytes | None) -> Any:
            if data == b"boom":
                raise MemoryError("too big")
            return data

    reader = Reader(None, Broken(), Broken(), None)
    keys, _values, stamps, failures = reader.decode(
        [(b"a", b"x", 5), (b"boom", b"x", 6), (b"b", b"boom", 7), (b"c", b"x", None)]
    )
    assert (keys, stamps) == ([b"a"], [5])
    assert failures == [
        (1, "key serde broken failed: MemoryError: too big"),
        (2, "value serde broken failed: MemoryError: too big"),
        (3, "record has no timestamp and the source has no timestamp extractor"),
    ]
