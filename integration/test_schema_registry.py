"""Schema Registry serdes on a real broker and a real registry (Apicurio Registry from
Maven Central, :mod:`kstream.dev.schemaregistry`), through `kstream run --bounded` of
``topologies/registry_orders.py``:

* v1 and v2 Avro writers on one topic are read as v2; the Protobuf output equals the
  example's ``expected_output`` exactly; a record naming an unknown schema id and one
  whose body is cut short go to the dead-letter topic with the reason;
* with the registry down the job retries, then fails naming the outage, and nothing
  is dead-lettered.
"""

from __future__ import annotations

import io
import runpy
import struct
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fastavro
import pytest

from integration.ci import unavailable
from integration.cli_job import CLI
from integration.e2e.harness import REPO, write_renamed_topology
from integration.edge_tools import read_all
from kstream.dev.jvm import DevServerError
from kstream.dev.schemaregistry import SchemaRegistry
from kstream.kafka.clients import TopicSpec, ensure_topics, make_admin, make_producer
from kstream.serde import AvroSerde, ProtobufSerde, SerdeUnavailable

EXAMPLE = REPO / "topologies" / "registry_orders.py"
example = runpy.run_path(str(EXAMPLE))
ORDER_V1, ORDER_V2 = example["ORDER_V1"], example["ORDER_V2"]


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SchemaRegistry]:
    server = SchemaRegistry(tmp_path_factory.mktemp("registry"))
    try:
        server.start()
    except DevServerError as e:
        unavailable("a Schema Registry (Apicurio)", str(e).splitlines()[0])
    yield server
    server.stop()


def _run(topology: Path, bootstrap: str, app: str, url: str, tmp: Path, *extra: str) -> Any:
    return subprocess.run(
        [*CLI, "run", str(topology), "--bootstrap", bootstrap, "--app-id", app, "--bounded",
         "--store", f"file://{tmp}/store", "--state-dir", str(tmp / "state"),
         "-X", f"schema.registry.url={url}", *extra],
        capture_output=True, text=True, timeout=240, cwd=REPO,
    )  # fmt: skip


def test_evolving_avro_in_protobuf_out_bad_records_dead_lettered(
    kafka_bootstrap: str,
    registry: SchemaRegistry,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    source, sink, app = unique_name("orders"), unique_name("lines"), unique_name("app")
    ensure_topics(make_admin(kafka_bootstrap), [TopicSpec(source, 2)])
    # Two generations of producers, registering their schemas as producers do.
    v1 = AvroSerde.registry(registry.url, schema=ORDER_V1, topic=source, auto_register=True)
    v2 = AvroSerde.registry(registry.url, schema=ORDER_V2, topic=source, auto_register=True)
    orders: list[dict[str, Any]] = []
    producer = make_producer(kafka_bootstrap)
    for i in range(40):
        user = f"u{i % 4}"
        if i < 20 or i % 2:
            order = {"id": i, "user": user, "amount": (i * 937) % 20_000 - 500}
            data = v1.serialize(order)
        else:
            order = {"id": i, "user": user, "amount": 3_000_000_000 + i, "currency": "USD"}
            data = v2.serialize(order)
        orders.append(order)
        producer.produce(source, data, key=user.encode(), partition=0, timestamp=1_000 + i)
    unknown = struct.pack(">bI", 0, 987_654) + b"\x02"
    cut = v1.serialize({"id": 99, "user": "u9", "amount": 5})
    assert cut is not None
    producer.produce(source, unknown, key=b"bad", partition=1, timestamp=2_000)
    producer.produce(source, cut[:-1], key=b"cut", partition=1, timestamp=2_001)
    assert producer.flush(30) == 0

    topology = write_renamed_topology(
        EXAMPLE, {"orders": source, "order-lines": sink}, tmp_path / "registry_orders.py"
    )
    done = _run(topology, kafka_bootstrap, app, registry.url, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]

    reader = ProtobufSerde.registry(registry.url, message_type=example["OrderLine"])
    got = []
    for r in read_all(kafka_bootstrap, sink):
        assert r.key is not None
        line = reader.deserialize(r.value)
        got.append(
            (
                r.key.decode(),
                {f: getattr(line, f) for f in ("id", "user", "cents", "currency", "large")},
            )
        )
    assert got == example["expected_output"](orders)
    assert any(line["currency"] == "USD" for _u, line in got)  # v2 records
    assert any(line["currency"] == "EUR" for _u, line in got)  # v1 records, the default
    # The job registered its output schema under the record-name subject; a lookup-only
    # writer (auto_register=False, the production default) finds the same id.
    lookup = ProtobufSerde.registry(
        registry.url, message_type=example["OrderLine"], strategy="record"
    )
    line = example["OrderLine"](id=1, user="u", cents=2, currency="EUR")
    first_value = read_all(kafka_bootstrap, sink)[0].value
    assert first_value is not None
    assert (lookup.serialize(line) or b"")[:5] == first_value[:5]
    missing = AvroSerde.registry(registry.url, schema=ORDER_V1, subject=unique_name("none"))
    with pytest.raises(SerdeUnavailable, match="register it"):
        missing.serialize({"id": 1, "user": "u", "amount": 1})

    dead = read_all(kafka_bootstrap, f"{app}.dlq")
    reasons = {r.key: bytes(dict(r.headers)["ks.error"] or b"").decode() for r in dead}
    assert [r.value for r in dead] == [unknown, cut[:-1]]  # the original bytes
    assert reasons[b"bad"].startswith("schema id 987654: not in the schema registry")
    assert reasons[b"cut"].startswith("invalid Avro data (writer schema id ")


def test_an_unreachable_registry_fails_the_job_and_dead_letters_nothing(
    kafka_bootstrap: str,
    registry: SchemaRegistry,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    source, sink, app = unique_name("orders"), unique_name("lines"), unique_name("app")
    ensure_topics(make_admin(kafka_bootstrap), [TopicSpec(source, 1)])
    buf = io.BytesIO()
    buf.write(struct.pack(">bI", 0, 1))
    fastavro.schemaless_writer(
        buf, fastavro.parse_schema(ORDER_V1), {"id": 1, "user": "u", "amount": 5}
    )
    producer = make_producer(kafka_bootstrap)
    producer.produce(source, buf.getvalue(), key=b"u", timestamp=1_000)
    assert producer.flush(30) == 0
    down = SchemaRegistry(tmp_path / "down")  # never started: its port refuses connections
    down.port = registry.port + 1 if registry.port < 65_000 else registry.port - 1
    topology = write_renamed_topology(
        EXAMPLE, {"orders": source, "order-lines": sink}, tmp_path / "registry_orders.py"
    )
    done = _run(
        topology, kafka_bootstrap, app, down.url, tmp_path, "-X", "schema.registry.retry.for.s=2"
    )
    assert done.returncode != 0
    assert f"schema registry {down.url} unreachable: schema id 1 failed" in done.stderr
    assert "no record is dead-lettered" in done.stderr
    assert read_all(kafka_bootstrap, f"{app}.dlq") == []
    assert read_all(kafka_bootstrap, sink) == []
