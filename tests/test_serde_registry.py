"""Schema Registry serdes (kstream.serde.registry*) with confluent-kafka's real client
against an in-process registry over HTTP (integration/registry_stub.py): Avro schema
resolution by writer id, bad input as SerdeError (dead letters), an unreachable
registry as SerdeUnavailable (the task fails), subjects and auto-registration,
Protobuf and JSON Schema, and the job's ``schema.registry.*`` settings."""

from __future__ import annotations

import io
import json
import re
import socket
import struct
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from typing import Any

import fastavro
import pytest

from integration.registry_stub import RegistryStub, _handler
from kstream.config import KafkaSettings
from kstream.elements.reader import Reader
from kstream.serde import (
    AvroSerde,
    BytesSerde,
    JsonSchemaSerde,
    ProtobufSerde,
    SerdeError,
    SerdeUnavailable,
)
from kstream.serde import registry as registry_module
from kstream.serde.registry import use_settings

V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [{"name": "id", "type": "long"}, {"name": "amount", "type": "int"}],
}
V2 = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "amount", "type": "long"},  # int -> long: a promotion
        {"name": "currency", "type": "string", "default": "EUR"},  # added with a default
    ],
}
NEEDS_COUNTRY = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [{"name": "id", "type": "long"}, {"name": "country", "type": "string"}],
}


@pytest.fixture
def stub() -> Iterator[RegistryStub]:
    s = RegistryStub()
    yield s
    s.close()


@pytest.fixture(autouse=True)
def _no_job_settings() -> Iterator[None]:
    use_settings({})
    yield
    use_settings({})


def framed(sid: int, schema: dict[str, Any], value: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    buf.write(struct.pack(">bI", 0, sid))
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), value)
    return buf.getvalue()


def test_avro_resolves_each_writers_schema_against_the_reader_schema(stub: RegistryStub) -> None:
    v1 = stub.register("orders-value", json.dumps(V1))
    v2 = stub.register("orders-value", json.dumps(V2))
    serde = AvroSerde.registry(stub.url, reader_schema=V2)
    items = [
        framed(v1, V1, {"id": 1, "amount": 5}),
        framed(v2, V2, {"id": 2, "amount": 7, "currency": "USD"}),
        None,
        framed(v1, V1, {"id": 3, "amount": 9}),
    ]
    want = [
        {"id": 1, "amount": 5, "currency": "EUR"},
        {"id": 2, "amount": 7, "currency": "USD"},
        None,
        {"id": 3, "amount": 9, "currency": "EUR"},
    ]
    assert serde.deserialize_many(items) == want
    assert [serde.deserialize(x) for x in items] == want
    # Each schema fetched once, by id: the client's cache and the serde's.
    assert sorted(r for r in stub.requests if r.startswith("GET /schemas/ids/")) == [
        f"GET /schemas/ids/{v1}",
        f"GET /schemas/ids/{v2}",
    ]


def test_avro_without_reader_schema_reads_as_written(stub: RegistryStub) -> None:
    v1 = stub.register("orders-value", json.dumps(V1))
    serde = AvroSerde.registry(stub.url)
    assert serde.deserialize(framed(v1, V1, {"id": 4, "amount": 1})) == {"id": 4, "amount": 1}


def test_bad_input_fails_the_record_with_the_reason(stub: RegistryStub) -> None:
    v1 = stub.register("orders-value", json.dumps(V1))
    serde = AvroSerde.registry(stub.url, reader_schema=NEEDS_COUNTRY)
    reader = Reader(None, BytesSerde(), AvroSerde.registry(stub.url, reader_schema=V2), None)
    good = framed(v1, V1, {"id": 1, "amount": 5})
    raw = [
        (b"k", good, 10),
        (b"k", framed(99, V1, {"id": 1, "amount": 5}), 11),  # unknown schema id
        (b"k", good[:-1], 12),  # a body cut short
        (b"k", b"\x01\x00\x00\x00\x01\x02", 13),  # no wire-format header
        (b"k", good + b"\x00", 14),  # trailing bytes
    ]
    _keys, values, stamps, failures = reader.decode(raw)
    assert values == [{"id": 1, "amount": 5, "currency": "EUR"}]
    assert stamps == [10]
    assert [(i, r.split(":")[0]) for i, r in failures] == [
        (1, "schema id 99"),
        (2, "invalid Avro data (writer schema id 1)"),
        (3, "not Schema Registry framed"),
        (4, "invalid Avro data (writer schema id 1)"),
    ]
    assert "not in the schema registry" in failures[0][1]
    assert "1 trailing bytes" in failures[3][1]
    with pytest.raises(
        SerdeError, match="writer schema id 1 cannot be resolved against the reader schema"
    ):
        serde.deserialize(good)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_registry_is_an_outage_not_bad_data() -> None:
    port = _closed_port()
    serde = AvroSerde.registry(f"http://127.0.0.1:{port}", reader_schema=V2, retry_for=0.35)
    waits: list[float] = []
    serde.access._sleep = waits.append  # backoff without waiting
    serde.access._clock = lambda: sum(waits)  # only the backoff counts, however slow the host
    reader = Reader(None, BytesSerde(), serde, None)
    with pytest.raises(SerdeUnavailable) as e:
        reader.decode([(b"k", framed(1, V1, {"id": 1, "amount": 5}), 10)])
    msg = str(e.value)
    assert f"schema registry http://127.0.0.1:{port} unreachable: schema id 1 failed" in msg
    assert "ConnectError" in msg and "no record is dead-lettered" in msg
    assert waits == [0.1, 0.2]  # exponential backoff, then the 0.35 s are used up


def test_a_registry_that_comes_back_within_the_retry_window_is_used() -> None:
    port = _closed_port()
    serde = AvroSerde.registry(f"http://127.0.0.1:{port}", reader_schema=V2, retry_for=30)
    stub = RegistryStub.__new__(RegistryStub)
    started: list[RegistryStub] = []

    def start_registry(_delay: float) -> None:  # the registry comes up during the backoff
        if started:
            return
        stub.schemas, stub.subjects, stub.requests = [], {}, []
        import threading

        stub.lock = threading.Lock()
        stub.server = ThreadingHTTPServer(("127.0.0.1", port), _handler(stub))
        stub.thread = threading.Thread(target=stub.server.serve_forever, daemon=True)
        stub.thread.start()
        stub.register("orders-value", json.dumps(V1))
        started.append(stub)

    serde.access._sleep = start_registry
    try:
        assert serde.deserialize(framed(1, V1, {"id": 1, "amount": 5})) == {
            "id": 1,
            "amount": 5,
            "currency": "EUR",
        }
    finally:
        if started:
            stub.close()


def test_writing_looks_the_schema_up_unless_auto_register(stub: RegistryStub) -> None:
    value = {"id": 1, "amount": 5, "currency": "EUR"}
    lookup_only = AvroSerde.registry(stub.url, schema=V2, topic="orders")
    with pytest.raises(SerdeUnavailable, match=r"not in the schema registry.*register it"):
        lookup_only.serialize(value)
    registering = AvroSerde.registry(stub.url, schema=V2, topic="orders", auto_register=True)
    data = registering.serialize(value)
    assert stub.subjects == {"orders-value": [1]}
    assert data is not None and data[:5] == b"\x00\x00\x00\x00\x01"
    # Now registered: the lookup-only serde finds it, and the bytes read back.
    assert lookup_only.serialize(value) == data
    assert AvroSerde.registry(stub.url, reader_schema=V2).deserialize(data) == value
    with pytest.raises(SerdeError, match="does not match the Avro schema"):
        registering.serialize({"id": "x"})


def test_record_name_strategy_and_explicit_subject(stub: RegistryStub) -> None:
    AvroSerde.registry(stub.url, schema=V1, strategy="record", auto_register=True).serialize(
        {"id": 1, "amount": 2}
    )
    AvroSerde.registry(stub.url, schema=V1, subject="my-subject", auto_register=True).serialize(
        {"id": 1, "amount": 2}
    )
    assert sorted(stub.subjects) == ["my-subject", "shop.Order"]
    with pytest.raises(ValueError, match="needs the topic"):
        AvroSerde.registry(stub.url, schema=V1)


def test_job_settings_give_the_url_and_never_reach_librdkafka(stub: RegistryStub) -> None:
    settings = KafkaSettings(
        {
            "schema.registry.url": stub.url,
            "schema.registry.basic.auth.user.info": "me:s3cret",
            "linger.ms": "5",
        }
    )
    assert dict(settings) == {"linger.ms": "5"}  # what librdkafka gets
    assert "s3cret" not in repr(settings)
    use_settings(settings.registry)
    v1 = stub.register("orders-value", json.dumps(V1))
    serde = AvroSerde.registry(reader_schema=V1)
    assert serde.deserialize(framed(v1, V1, {"id": 1, "amount": 5})) == {"id": 1, "amount": 5}
    conf = registry_module.client_config(None)
    assert conf["url"] == stub.url and conf["basic.auth.user.info"] == "me:s3cret"
    use_settings({})
    with pytest.raises(SerdeUnavailable, match="no schema registry URL"):
        AvroSerde.registry(reader_schema=V1).deserialize(framed(v1, V1, {"id": 1, "amount": 5}))


def order_message_class() -> Any:
    """A protobuf message class built at run time (no protoc here)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    f = descriptor_pb2.FileDescriptorProto(name="kstream_test_order.proto", package="kstest")
    f.syntax = "proto3"
    m = f.message_type.add(name="OrderTotal")
    m.field.add(name="id", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT64)
    m.field.add(name="total", number=2, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT64)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("kstest.OrderTotal"))


def test_protobuf_round_trip_and_bad_bytes(stub: RegistryStub) -> None:
    cls = order_message_class()
    serde = ProtobufSerde.registry(stub.url, message_type=cls, topic="totals", auto_register=True)
    data = serde.serialize({"id": "7", "total": "12"})  # a dict of the fields (JSON mapping)
    assert data is not None and data[0] == 0
    assert stub.subjects == {"totals-value": [1]}
    assert stub.schemas[0]["schemaType"] == "PROTOBUF"
    back = serde.deserialize(data)
    assert (back.id, back.total) == (7, 12)
    assert serde.serialize(cls(id=7, total=12)) == data
    with pytest.raises(SerdeError, match="invalid Protobuf data"):
        serde.deserialize(data[:6] + b"\xff\xff")


def test_json_schema_round_trip_and_validation(stub: RegistryStub) -> None:
    schema = {
        "type": "object",
        "properties": {"id": {"type": "integer"}, "name": {"type": "string"}},
        "required": ["id"],
    }
    serde = JsonSchemaSerde.registry(stub.url, schema=schema, topic="people", auto_register=True)
    data = serde.serialize({"id": 1, "name": "ada"})
    assert stub.schemas[0]["schemaType"] == "JSON"
    assert serde.deserialize(data) == {"id": 1, "name": "ada"}
    with pytest.raises(SerdeError, match="not valid JSON Schema"):
        serde.serialize({"name": "no id"})
    bad = b"\x00\x00\x00\x00\x01" + b'{"name": "no id"}'
    with pytest.raises(SerdeError, match="invalid JSON Schema data"):
        serde.deserialize(bad)


@pytest.mark.parametrize(
    ("status", "retried", "message"),
    [
        (401, False, "refused schema id 1: HTTP 401 (error 40101): Unauthorized"),
        (503, True, "unreachable: schema id 1 failed"),
    ],
)
def test_refusals_and_server_errors_fail_the_task(
    stub: RegistryStub, monkeypatch: pytest.MonkeyPatch, status: int, retried: bool, message: str
) -> None:
    def answer(method: str, path: str, body: Any) -> tuple[int, Any]:
        return status, {"error_code": status * 100 + 1, "message": "Unauthorized"}

    monkeypatch.setattr(stub, "answer", answer)
    serde = AvroSerde.registry(stub.url, reader_schema=V1, retry_for=0.25)
    waits: list[float] = []
    serde.access._sleep = waits.append
    serde.access._clock = lambda: sum(waits)  # only the backoff counts, however slow the host
    with pytest.raises(SerdeUnavailable, match=re.escape(message)):
        serde.deserialize(framed(1, V1, {"id": 1, "amount": 5}))
    assert bool(waits) is retried


def test_an_unknown_id_is_asked_again_later(
    stub: RegistryStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    serde = AvroSerde.registry(stub.url, reader_schema=V1)
    record = framed(1, V1, {"id": 1, "amount": 5})
    with pytest.raises(SerdeError, match="schema id 1: not in the schema registry"):
        serde.deserialize(record)
    stub.register("late-value", json.dumps(V1))  # e.g. a lagging registry replica caught up
    with pytest.raises(SerdeError):
        serde.deserialize(record)  # remembered for a while: not asked per record
    assert stub.requests.count("GET /schemas/ids/1") == 1
    reason, _until = serde._bad_ids[1]
    serde._bad_ids[1] = (reason, 0.0)  # its time is up
    assert serde.deserialize(record) == {"id": 1, "amount": 5}
