"""Deterministic generator of the benchmark input topics.

The same ``InputSpec`` always yields the same records (content, key, partition and
event timestamp), so every contender and every run reads identical input. A topic is
loaded once: when it already holds exactly the expected number of records it is
left alone; any other count means a broken earlier load, and the topic is recreated.

    python -m benchmarks.generate --bootstrap 127.0.0.1:19092 --records 20000
"""

from __future__ import annotations

import io
import random
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, Literal

import click
import fastavro

from benchmarks.workloads import EVENT_SCHEMA_FILE, KIND_WEIGHTS, KINDS, EndOffsets, load_schema
from kstream.kafka.clients import (
    KafkaError,
    KafkaException,
    TopicPartition,
    TopicSpec,
    ensure_topics,
    make_admin,
    make_consumer,
    make_producer,
)

#: "avro-sr": the Avro body framed in the Schema Registry wire format (magic byte 0, the
#: 4-byte schema id ``InputSpec.schema_id``), as a registry-aware producer writes it.
Format = Literal["json", "avro", "avro-sr"]

#: Event time of the first record (2023-11-14T22:13:20Z); fixed so runs are identical.
START_TS_MS = 1_700_000_000_000
#: Input and output topics keep their records whatever their (old) event timestamps.
KEEP_FOREVER = {"retention.ms": "-1"}
#: Errors a just-created topic answers with until its partitions have leaders.
_NO_LEADER_YET = {
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
}


@dataclass(frozen=True)
class InputSpec:
    """One input data set.

    ``records`` events over ``keys`` users (``u0`` … ``u<keys-1>``), spread over
    ``partitions`` by CRC-32 of the key. Event time advances by ``1000 / event_rate`` ms
    per record from ``START_TS_MS``. With ``cover`` the user of record *i* is ``i % keys``
    (every key appears, for the recovery state); otherwise users are drawn uniformly.
    """

    records: int
    keys: int = 100_000
    partitions: int = 4
    seed: int = 7
    event_rate: int = 5_000
    fmt: Format = "json"
    cover: bool = False
    schema_id: int = 0  # "avro-sr": the writer schema's id in the registry

    def __post_init__(self) -> None:
        if self.records < 1 or self.keys < 1 or self.partitions < 1 or self.event_rate < 1:
            raise ValueError(f"records, keys, partitions and event_rate must be >= 1: {self}")

    @property
    def topic(self) -> str:
        """Topic name; encodes every parameter, so a loaded topic is never mistaken for another."""
        cover = "c" if self.cover else "u"
        fmt = f"{self.fmt}{self.schema_id}" if self.fmt == "avro-sr" else self.fmt
        return (
            f"bench.in.{fmt}.n{self.records}.k{self.keys}.p{self.partitions}"
            f".s{self.seed}.r{self.event_rate}{cover}"
        )

    @property
    def event_span_ms(self) -> int:
        """Event time from the first to the last record."""
        return event_ts(self, self.records - 1) - START_TS_MS


def event_ts(spec: InputSpec, index: int) -> int:
    """Event timestamp (ms) of record ``index``."""
    return START_TS_MS + index * 1000 // spec.event_rate


def partition_of(key: bytes, partitions: int) -> int:
    """The partition of ``key``: CRC-32 modulo the partition count (client-independent)."""
    return zlib.crc32(key) % partitions


def events(spec: InputSpec) -> Iterator[tuple[int, bytes, dict[str, Any], int]]:
    """Yield ``(partition, key, event, timestamp_ms)`` for every record of ``spec``, in order."""
    rng = random.Random(spec.seed)
    choices = rng.choices
    randrange = rng.randrange
    kinds = list(KINDS)
    # The same draws as choices(kinds, weights), without summing the weights each time.
    cum_weights = list(accumulate(KIND_WEIGHTS))
    parts, keys, cover = spec.partitions, spec.keys, spec.cover
    rate, crc32 = spec.event_rate, zlib.crc32
    for i in range(spec.records):
        uid = i % keys if cover else randrange(keys)
        user = f"u{uid}"
        key = user.encode()
        ts = START_TS_MS + i * 1000 // rate  # event_ts(spec, i)
        event = {
            "user": user,
            "kind": choices(kinds, cum_weights=cum_weights)[0],
            "amount": randrange(0, 10_000) / 100,
            "ts": ts,
        }
        yield crc32(key) % parts, key, event, ts


def _json_event(event: dict[str, Any]) -> bytes:
    """An event of ``events`` as compact JSON: what ``json.dumps(event, separators=(",",
    ":"))`` writes (its strings need no escapes; a float is written as its repr), about
    3x faster (loading 10 M records is part of the scaling run's time)."""
    return (
        f'{{"user":"{event["user"]}","kind":"{event["kind"]}",'
        f'"amount":{event["amount"]!r},"ts":{event["ts"]}}}'
    ).encode()


class Encoder:
    """Event dict -> value bytes in the spec's format (compact JSON or schemaless Avro)."""

    def __init__(self, fmt: Format, schema_id: int = 0) -> None:
        self.fmt = fmt
        self._header = b"\x00" + schema_id.to_bytes(4, "big") if fmt == "avro-sr" else b""
        self._schema = fastavro.parse_schema(load_schema(EVENT_SCHEMA_FILE))

    def __call__(self, event: dict[str, Any]) -> bytes:
        if self.fmt == "json":
            return _json_event(event)
        buf = io.BytesIO()
        buf.write(self._header)
        fastavro.schemaless_writer(buf, self._schema, event)
        return buf.getvalue()


def watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    """``partition -> (low, high)`` watermark offsets of ``topic`` (high = end offset)."""
    consumer = make_consumer(bootstrap, f"bench-wm-{time.monotonic_ns()}", read_committed=False)
    try:
        out: dict[int, tuple[int, int]] = {}
        deadline = time.monotonic() + 30.0
        for p in range(partitions):
            while True:
                try:
                    low, high = consumer.get_watermark_offsets(
                        TopicPartition(topic, p), timeout=10.0
                    )
                    break
                except KafkaException as e:
                    # A just-created topic may not have a leader yet: retry until the deadline.
                    err = e.args[0]
                    retry = err.retriable() or err.code() in _NO_LEADER_YET
                    if not retry or time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
            out[p] = (int(low), int(high))
        return out
    finally:
        consumer.close()


def end_offsets(bootstrap: str, topic: str, partitions: int) -> EndOffsets:
    """The end offsets of a loaded input topic: what a bounded contender must process."""
    return EndOffsets(
        {p: high for p, (_, high) in watermarks(bootstrap, topic, partitions).items()}
    )


def held_records(bootstrap: str, topic: str, partitions: int) -> int:
    """Records held by ``topic`` (sum of high - low; input topics are never transactional)."""
    return sum(high - low for low, high in watermarks(bootstrap, topic, partitions).values())


def produce(bootstrap: str, spec: InputSpec, topic: str | None = None) -> int:
    """Write every record of ``spec`` to ``topic`` (default ``spec.topic``); return the count.

    Raises RuntimeError naming the first delivery error, if any.
    """
    topic = topic or spec.topic
    encode = Encoder(spec.fmt, spec.schema_id)
    producer = make_producer(
        bootstrap,
        extra={
            "linger.ms": 50,
            "batch.num.messages": 10_000,
            "acks": "all",
            "delivery.report.only.error": True,  # no Python callback per record
        },
    )
    errors: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None and len(errors) < 5:
            errors.append(str(err))

    n = 0
    for partition, key, event, ts in events(spec):
        value = encode(event)
        while True:
            try:
                producer.produce(
                    topic, value, key, partition=partition, timestamp=ts, on_delivery=on_delivery
                )
                break
            except BufferError:
                producer.poll(0.1)  # local queue full: serve deliveries, then retry
        n += 1
        if n % 10_000 == 0:
            producer.poll(0)
    remaining = producer.flush(120.0)
    if remaining or errors:
        raise RuntimeError(
            f"loading {topic}: {remaining} records undelivered after 120s, errors: {errors}"
        )
    return n


def load(bootstrap: str, spec: InputSpec, *, log: bool = True) -> EndOffsets:
    """Make sure ``spec.topic`` holds exactly ``spec.records`` records; return its end offsets.

    Skips the load when the topic already holds that count; recreates a topic holding
    any other count (an interrupted earlier load).
    """
    admin = make_admin(bootstrap)
    topic = spec.topic
    ensure_topics(admin, [TopicSpec(topic, spec.partitions, KEEP_FOREVER)])
    held = held_records(bootstrap, topic, spec.partitions)
    if held == spec.records:
        if log:
            click.echo(f"{topic}: already holds {held} records, not reloaded")
        return end_offsets(bootstrap, topic, spec.partitions)
    if held != 0:
        click.echo(f"{topic}: holds {held} records, expected {spec.records}: recreating")
        delete_topic(bootstrap, topic)
        ensure_topics(admin, [TopicSpec(topic, spec.partitions, KEEP_FOREVER)])
    t0 = time.monotonic()
    n = produce(bootstrap, spec)
    if log:
        click.echo(f"{topic}: loaded {n} records in {time.monotonic() - t0:.1f}s")
    held = held_records(bootstrap, topic, spec.partitions)
    if held != spec.records:
        raise RuntimeError(f"{topic}: holds {held} records after loading {spec.records}")
    return end_offsets(bootstrap, topic, spec.partitions)


def delete_topic(bootstrap: str, topic: str, timeout: float = 30.0) -> None:
    """Delete ``topic`` and wait until it is gone from the metadata."""
    admin = make_admin(bootstrap)
    for fut in admin.delete_topics([topic], operation_timeout=timeout).values():
        fut.result()
    deadline = time.monotonic() + timeout
    while topic in admin.list_topics(timeout=10.0).topics:
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {topic} still listed {timeout}s after deletion")
        time.sleep(0.1)


@click.command()
@click.option("--bootstrap", default="127.0.0.1:19092", show_default=True)
@click.option("--records", default=1_000_000, show_default=True)
@click.option("--keys", default=100_000, show_default=True)
@click.option("--partitions", default=4, show_default=True)
@click.option("--seed", default=7, show_default=True)
@click.option("--event-rate", default=5_000, show_default=True, help="events per event-time second")
@click.option("--format", "fmt", type=click.Choice(["json", "avro"]), default="json")
@click.option("--cover", is_flag=True, help="user of record i is i %% keys (every key present)")
def main(
    bootstrap: str,
    records: int,
    keys: int,
    partitions: int,
    seed: int,
    event_rate: int,
    fmt: Format,
    cover: bool,
) -> None:
    """Load one benchmark input topic (once) and print its name and end offsets."""
    spec = InputSpec(records, keys, partitions, seed, event_rate, fmt, cover)
    ends = load(bootstrap, spec)
    click.echo(f"{spec.topic} {ends.to_json()}")


if __name__ == "__main__":
    main()
