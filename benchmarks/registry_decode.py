"""w5-registry: w5's Avro input decoded through the Schema Registry path, against the
fixed-schema fastavro path, per record, in the same run.

The records are w5's (``generate.events`` of the same spec, ``schemas/event.avsc``),
framed in the Confluent wire format (magic byte, schema id) and split between two
writer schema ids (v1 = ``event.avsc``, v2 = the same record with one more field with
a default, as a topic with an evolving writer schema holds). Timed, in alternating
rounds so drift hits both alike (the median of ``--rounds`` is reported):

* ``fixed``: ``AvroSerde(event.avsc, schema_id=1).deserialize_many`` of records all
  written with v1 (the fixed-schema path, header checked; w5's kstream source);
* ``registry``: ``AvroSerde.registry(url, reader_schema=event.avsc).deserialize_many``
  of the v1 records (writer = reader: no resolution);
* ``registry-evolving``: the same serde over the half-v1, half-v2 records (v2 resolved
  against the reader schema).

The registry is the in-process one of ``integration/registry_stub.py`` over HTTP; a
schema is fetched once per id, before timing. Target: ``registry`` <= 1.1x ``fixed``
per record (issue 43). ``python -m benchmarks.registry_decode --records 200000``.
"""

from __future__ import annotations

import io
import json
import statistics
import struct
import time
from collections.abc import Callable, Sequence
from itertools import islice
from typing import Any

import click
import fastavro

from benchmarks.generate import EVENT_SCHEMA_FILE, InputSpec, events
from benchmarks.workloads import load_schema
from integration.registry_stub import RegistryStub
from kstream.serde import AvroSerde

TARGET = 1.1


def v2_of(v1: dict[str, Any]) -> dict[str, Any]:
    """``v1`` with a field added with a default (a compatible evolution)."""
    return {**v1, "fields": [*v1["fields"], {"name": "region", "type": "string", "default": "eu"}]}


def framed(sid: int, schema: Any, value: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    buf.write(struct.pack(">bI", 0, sid))
    fastavro.schemaless_writer(buf, schema, value)
    return buf.getvalue()


def per_record_us(
    decode: Callable[[Sequence[bytes]], list[Any]], items: Sequence[bytes], batch: int
) -> float:
    start = time.perf_counter()
    for i in range(0, len(items), batch):
        decode(items[i : i + batch])
    return (time.perf_counter() - start) / len(items) * 1e6


def measure(records: int, rounds: int, batch: int) -> dict[str, float]:
    """Median microseconds per record of each path (see the module doc)."""
    v1 = load_schema(EVENT_SCHEMA_FILE)
    v2 = v2_of(v1)
    stub = RegistryStub()
    try:
        id1 = stub.register("bench.in-value", json.dumps(v1))
        id2 = stub.register("bench.in-value", json.dumps(v2))
        p1, p2 = fastavro.parse_schema(v1), fastavro.parse_schema(v2)
        spec = InputSpec(records, fmt="avro")
        evs = [e for _p, _k, e, _t in islice(events(spec), records)]
        only_v1 = [framed(id1, p1, e) for e in evs]
        mixed = [
            framed(id2, p2, {**e, "region": "us"}) if i % 2 else framed(id1, p1, e)
            for i, e in enumerate(evs)
        ]
        fixed = AvroSerde(v1, schema_id=id1)
        registry = AvroSerde.registry(stub.url, reader_schema=v1)
        registry.deserialize_many(mixed[:2])  # both schemas fetched before timing
        assert registry.deserialize_many(only_v1) == fixed.deserialize_many(only_v1)
        paths: dict[str, tuple[Callable[[Sequence[bytes]], list[Any]], Sequence[bytes]]] = {
            "fixed": (fixed.deserialize_many, only_v1),
            "registry": (registry.deserialize_many, only_v1),
            "registry-evolving": (registry.deserialize_many, mixed),
        }
        times: dict[str, list[float]] = {name: [] for name in paths}
        for _ in range(rounds):
            for name, (decode, items) in paths.items():
                times[name].append(per_record_us(decode, items, batch))
        return {name: statistics.median(ts) for name, ts in times.items()}
    finally:
        stub.close()


@click.command()
@click.option("--records", default=200_000, show_default=True)
@click.option("--rounds", default=7, show_default=True)
@click.option("--batch", default=500, show_default=True, help="records per deserialize_many")
def main(records: int, rounds: int, batch: int) -> None:
    """Print microseconds per record of each path and the registry/fixed ratio."""
    us = measure(records, rounds, batch)
    for name, t in us.items():
        print(f"{name:18s} {t:6.3f} us/record  {t / us['fixed']:.3f}x fixed")
    ratio = us["registry"] / us["fixed"]
    verdict = "met" if ratio <= TARGET else "MISSED"
    print(f"target registry <= {TARGET}x fixed: {verdict} ({ratio:.3f}x)")


if __name__ == "__main__":
    main()
