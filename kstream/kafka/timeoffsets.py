"""Where partitions start at a given time: the broker's offsets by timestamp (ListOffsets
by time), for the partitions a source topic gained when a job's state is rescaled to it
(``--new-partitions-from``, :mod:`kstream.rescale.savepoint`)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from kstream.config import JobConfig
from kstream.kafka.clients import make_consumer
from kstream.kafka.offsets import RETRIABLE_OFFSET_ERRORS, refresh_metadata, watermark_offsets
from kstream.kafka.reachability import Backoff

__all__ = ["NoStartOffsets", "at_time", "offsets_at", "starts_at"]


class NoStartOffsets(Exception):
    """The brokers did not tell where partitions start at the time (one line: why)."""


def offsets_at(
    consumer: Consumer, topic: str, partitions: list[int], timestamp_ms: int, timeout: float = 30.0
) -> dict[int, int]:
    """Each of ``topic``'s ``partitions``: the offset of its first record whose Kafka
    timestamp is at or after ``timestamp_ms``, or its end offset when it has none (what
    is written later starts there). Asked again on what passes (a partition just
    added, a leader being elected); KafkaException past ``timeout``."""
    deadline = time.monotonic() + timeout
    backoff = Backoff(0.1, 2.0)
    while True:
        try:
            found = consumer.offsets_for_times(
                [TopicPartition(topic, p, timestamp_ms) for p in partitions],
                timeout=min(5.0, max(1.0, deadline - time.monotonic())),
            )
            errors = [tp.error for tp in found if tp.error is not None]
            if errors:
                raise KafkaException(errors[0])
        except KafkaException as e:
            if e.args[0].code() not in RETRIABLE_OFFSET_ERRORS or time.monotonic() > deadline:
                raise
            refresh_metadata(consumer, 5.0, topic)
            time.sleep(backoff.next())
            continue
        return {
            tp.partition: tp.offset
            if tp.offset >= 0
            else watermark_offsets(consumer, topic, tp.partition, timeout)[1]
            for tp in found
        }


def starts_at(job: JobConfig) -> Callable[[str, list[int]], dict[int, int]] | None:
    """``(topic, partitions) -> partition -> offset`` at ``job``'s ``--new-partitions-from``
    time on its cluster (a consumer per call, closed after); None without that time."""
    return at_time(job.bootstrap_servers, job.kafka, job.start.new_partitions_from)


def at_time(
    bootstrap: str, settings: Mapping[str, Any] | None, timestamp_ms: int | None
) -> Callable[[str, list[int]], dict[int, int]] | None:
    """``(topic, partitions) -> partition -> offset`` at ``timestamp_ms`` on the cluster
    at ``bootstrap`` (a consumer per call, closed after); None without a time."""
    if timestamp_ms is None:
        return None
    at = timestamp_ms

    def resolve(topic: str, partitions: list[int]) -> dict[int, int]:
        consumer = make_consumer(
            bootstrap, f"kstream-offsets-{uuid.uuid4().hex[:8]}", extra=settings
        )
        try:
            return offsets_at(consumer, topic, partitions, at)
        except KafkaException as e:
            err = e.args[0] if e.args else e
            why = err.str() if hasattr(err, "str") else str(err)
            raise NoStartOffsets(f"{topic} partitions {partitions}: {why}") from None
        finally:
            consumer.close()

    return resolve
