"""The deterministic input generator (no broker)."""

from __future__ import annotations

import io
import json
import zlib

import fastavro
import pytest

from benchmarks.generate import START_TS_MS, Encoder, InputSpec, event_ts, events, partition_of
from benchmarks.workloads import EVENT_SCHEMA_FILE, KINDS, load_schema


def test_same_spec_same_records_other_seed_other_records() -> None:
    spec = InputSpec(records=500, keys=50, seed=3)
    assert list(events(spec)) == list(events(spec))
    assert list(events(spec)) != list(events(InputSpec(records=500, keys=50, seed=4)))


def test_records_are_keyed_partitioned_and_timestamped_as_specified() -> None:
    spec = InputSpec(records=1_000, keys=100, partitions=3, event_rate=400)
    rows = list(events(spec))
    assert len(rows) == 1_000
    for i, (partition, key, event, ts) in enumerate(rows):
        assert key == event["user"].encode()
        assert 0 <= int(event["user"][1:]) < 100
        assert partition == zlib.crc32(key) % 3 == partition_of(key, 3)
        assert ts == event["ts"] == START_TS_MS + i * 1000 // 400
        assert event["kind"] in {"click", "view", "purchase", "signup"}
        assert 0.0 <= event["amount"] < 100.0
    assert spec.event_span_ms == event_ts(spec, 999) - START_TS_MS == 2497


def test_cover_mode_uses_every_key_in_order() -> None:
    spec = InputSpec(records=10, keys=4, cover=True)
    assert [e["user"] for _, _, e, _ in events(spec)] == [f"u{i % 4}" for i in range(10)]


def test_topic_name_encodes_every_parameter() -> None:
    a = InputSpec(records=10, keys=4, partitions=2, seed=1, event_rate=9, fmt="avro", cover=True)
    assert a.topic == "bench.in.avro.n10.k4.p2.s1.r9c"
    assert InputSpec(records=10).topic == "bench.in.json.n10.k100000.p4.s7.r5000u"


def test_invalid_spec_is_rejected() -> None:
    with pytest.raises(ValueError, match="must be >= 1"):
        InputSpec(records=0)


def test_json_and_avro_encodings_decode_to_the_event() -> None:
    _, _, event, _ = next(events(InputSpec(records=1)))
    assert Encoder("json")(event) == (
        b'{"user":"%s","kind":"%s","amount":%r,"ts":%d}'
        % (event["user"].encode(), event["kind"].encode(), event["amount"], event["ts"])
    )
    schema = fastavro.parse_schema(load_schema(EVENT_SCHEMA_FILE))
    decoded = fastavro.schemaless_reader(io.BytesIO(Encoder("avro")(event)), schema, None)
    assert decoded == event


def test_json_encoding_is_what_json_dumps_writes() -> None:
    """The hand-written JSON of an event is byte for byte json.dumps' compact form
    (whole cents, from 0.0 to 99.99; every kind)."""
    rows = list(events(InputSpec(records=3000, keys=20, seed=5)))
    assert {e["kind"] for _, _, e, _ in rows} == set(KINDS)
    encode = Encoder("json")
    for _, _, event, _ in rows:
        assert encode(event) == json.dumps(event, separators=(",", ":")).encode()
    edge = {"user": "u0", "kind": "view", "amount": 0.0, "ts": 1}
    for amount in (0.0, 0.01, 0.1, 1.1, 99.99, 12.3):
        edge["amount"] = amount
        assert encode(edge) == json.dumps(edge, separators=(",", ":")).encode()
