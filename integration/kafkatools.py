"""Helpers for integration tests: produce a batch, consume until a count, read offsets.

Every wait has a deadline and fails with what was observed, never a bare sleep.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

from kstream.kafka.clients import (
    AdminClient,
    Consumer,
    KafkaException,
    Producer,
    TopicPartition,
    produce_with_retry,
    watermark_offsets,
)

Record = tuple[bytes | None, bytes | None]


def produce(
    producer: Producer, topic: str, records: Iterable[Record], timeout: float = 30.0
) -> int:
    """Produce ``(key, value)`` records and flush; returns the count, raises on any delivery error."""
    errors: list[str] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(str(err))

    n = 0
    for key, value in records:
        produce_with_retry(producer, topic, value, key, on_delivery=on_delivery)
        n += 1
    left = producer.flush(timeout)
    assert left == 0, f"{left} records still undelivered after {timeout}s"
    assert not errors, f"{len(errors)} delivery errors, first: {errors[0]}"
    return n


def consume(
    consumer: Consumer, count: int, timeout: float = 60.0, batch: int = 500
) -> list[Record]:
    """Poll until ``count`` records arrived; fails after ``timeout`` with how many came."""
    out: list[Record] = []
    deadline = time.monotonic() + timeout
    while len(out) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"got {len(out)} of {count} records within {timeout}s")
        for msg in consumer.consume(min(batch, count - len(out)), timeout=0.5):
            if msg.error() is not None:
                raise KafkaException(msg.error())
            out.append((msg.key(), msg.value()))
    return out


def end_offsets(consumer: Consumer, topic: str, partitions: int) -> dict[int, int]:
    """High watermark of each partition of ``topic``."""
    return {
        p: watermark_offsets(consumer, topic, p, 10.0)[1]  # retried while a leader moves
        for p in range(partitions)
    }


def committed_offsets(consumer: Consumer, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offset of each partition of ``topic`` (-1001 when none)."""
    tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10.0)
    return {tp.partition: tp.offset for tp in tps}


def wait_for_assignment(consumer: Consumer, timeout: float = 30.0) -> Sequence[TopicPartition]:
    """Poll (discarding nothing: asserts no record arrives) until the group assigned partitions."""
    deadline = time.monotonic() + timeout
    while not consumer.assignment():
        if time.monotonic() > deadline:
            raise AssertionError(f"no partitions assigned within {timeout}s")
        msg = consumer.poll(0.2)
        assert msg is None, f"unexpected record while waiting for assignment: {msg.value()!r}"
    return consumer.assignment()


def read_to_end(
    consumer: Consumer, topic: str, partitions: int, timeout: float = 30.0
) -> list[Record]:
    """Everything an assigned consumer can read until its position reaches every end offset.

    With ``read_committed`` the end is the last stable offset, so this returns exactly
    the committed records, in partition order.
    """
    ends = end_offsets(consumer, topic, partitions)
    out: list[Record] = []
    deadline = time.monotonic() + timeout
    while True:
        for msg in consumer.consume(500, timeout=0.2):
            if msg.error() is not None:
                raise KafkaException(msg.error())
            out.append((msg.key(), msg.value()))
        positions = consumer.position([TopicPartition(topic, p) for p in range(partitions)])
        if all(tp.offset >= ends[tp.partition] for tp in positions):
            return out
        if time.monotonic() > deadline:
            raise AssertionError(
                f"positions {[(tp.partition, tp.offset) for tp in positions]} did not reach "
                f"end offsets {ends} within {timeout}s; read {len(out)} records"
            )


def set_max_message_bytes(admin: AdminClient, topic: str, limit: int) -> None:
    """Set ``topic``'s ``max.message.bytes`` (the largest record batch it takes)."""
    entry = ConfigEntry(
        "max.message.bytes", str(limit), incremental_operation=AlterConfigOpType.SET
    )
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[entry])
    for f in admin.incremental_alter_configs([res]).values():
        f.result(30)
