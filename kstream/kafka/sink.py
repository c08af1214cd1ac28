"""Kafka sinks: exactly-once through a write-ahead buffer, and at-least-once (docs/design.md §7).

Both implement :class:`Sink`, so the worker drives them alike:

* ``write``/``write_batch`` serialized output records, ``write_columns`` one topic's
  records as parallel lists (the worker's way: no tuple per record),
* ``on_barrier(n)`` when the task aligned barrier *n* (before its snapshot),
* ``buffer_blob()`` into the task's snapshot (``None``: nothing to keep),
* ``on_checkpoint_completed(n)`` on ``CheckpointCompleted(n)``,
* ``recover(blob, attempt)`` once before the first record, and after each restore.

The exactly-once sink is :mod:`kstream.kafka.exactly_once_sink`.

**AtLeastOnceSink.** Records are produced at once by an idempotent producer and
flushed at the barrier; a replay after a restore may duplicate them.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from typing import Any

from kstream.config import Guarantee
from kstream.kafka.clients import (
    make_producer,
    produce_with_retry,
)
from kstream.sinkbuffer.epochs import (
    Chunk,
    ColumnBatch,
    OutputRecord,
    SinkError,
)
from kstream.sinkbuffer.spill import SegmentedBlob

__all__ = [
    "AtLeastOnceSink",
    "Sink",
    "SinkDeliveryError",
    "SinkFencedError",
]

log = logging.getLogger(__name__)


class SinkFencedError(SinkError):
    """A newer producer with this sink's transactional id exists: this task must stop."""


class SinkGroupFencedError(SinkFencedError):
    """The group refused the worker's offsets (``UNKNOWN_MEMBER_ID``, ``ILLEGAL_GENERATION``):
    the metadata sent was not of its current generation. Under the eager protocol the
    worker lost those inputs; under the cooperative one it may still hold them, the
    publication having raced a rebalance that moved the generation
    (``kstream.worker.checkpointed``)."""


class SinkDeliveryError(SinkError):
    """Records could not be delivered (at-least-once flush or DLQ flush failed)."""


# --------------------------------------------------------------------------- sinks


class Sink(ABC):
    """What the worker needs from a sink task, whatever its guarantee."""

    guarantee: Guarantee

    @abstractmethod
    def write(self, record: OutputRecord) -> None:
        """Accept one serialized output record."""

    @abstractmethod
    def write_batch(self, records: Iterable[OutputRecord]) -> None:
        """Accept many serialized output records (cheaper than ``write`` per record)."""

    def write_columns(
        self,
        topic: str,
        keys: list[bytes | None],
        values: list[bytes | None],
        timestamps: list[int],
    ) -> None:
        """Accept records for ``topic`` as parallel lists, partition and headers ``None``
        (the cheapest way in). The sink may keep the lists: do not change them afterwards."""
        self.write_batch(
            (topic, None, k, v, ts, None) for k, v, ts in zip(keys, values, timestamps, strict=True)
        )

    @abstractmethod
    def on_barrier(self, checkpoint_id: int) -> None:
        """Barrier ``checkpoint_id`` aligned: after this, ``buffer_blob`` belongs to its snapshot."""

    @abstractmethod
    def buffer_blob(self) -> bytes | None:
        """What the task's snapshot must keep for this sink (``None``: nothing)."""

    def snapshot_blob(self) -> bytes | SegmentedBlob | None:
        """``buffer_blob``, or a blob the upload thread writes (a spilled buffer's)."""
        return self.buffer_blob()

    @abstractmethod
    def on_checkpoint_completed(self, checkpoint_id: int) -> int:
        """Checkpoint ``checkpoint_id`` is committed; returns the records published now."""

    @abstractmethod
    def recover(self, blob: bytes | None, attempt: int) -> int:
        """Start or restart in ``attempt`` from the snapshot's ``blob``; returns records published."""

    @abstractmethod
    def close(self) -> None:
        """Release the producer (nothing is committed by closing)."""


_POLL_EVERY = 1000  # serve the producer's callbacks this often while producing a batch


def produce_chunks(producer: Any, chunks: Iterable[Chunk], on_delivery: Any = None) -> None:
    """Queue the records of ``chunks`` in order; when the local queue is full, serve it and
    retry (never drop). Column batches are produced from their lists, no tuple per record."""
    done = 0  # records queued so far: callbacks are served every _POLL_EVERY, across chunks
    for c in chunks:
        if isinstance(c, ColumnBatch):
            produce_batch(producer, c, done, on_delivery)
        else:
            produce_records(producer, c, done, on_delivery)
        done += len(c)


def produce_batch(producer: Any, batch: ColumnBatch, done: int, on_delivery: Any) -> None:
    produce, poll, topic = producer.produce, producer.poll, batch.topic
    # confluent-kafka's produce parses keyword arguments by looking each of its keywords
    # up by name: about half the cost of a call (w1: 2.2 -> 1.45 us per record). Its
    # positional layout is (topic, value, key, partition, callback, on_delivery,
    # timestamp, headers), "callback" an undocumented alias of on_delivery; with the
    # callback at both places and the timestamp at index 6, any other layout refuses
    # the call with a TypeError before queueing anything (an int is no headers, a
    # callable or None no timestamp), and the keyword call takes over.
    positional = True
    for n, (key, value, ts) in enumerate(
        zip(batch.keys, batch.values, batch.timestamps, strict=True), done + 1
    ):
        try:
            if positional:
                try:
                    produce(topic, value, key, -1, on_delivery, on_delivery, ts)
                except TypeError:
                    positional = False
                    produce(topic, value, key, timestamp=ts, on_delivery=on_delivery)
            else:
                produce(topic, value, key, timestamp=ts, on_delivery=on_delivery)
        except BufferError:  # local queue full
            produce_with_retry(
                producer, topic, value, key, full=True, timestamp=ts, on_delivery=on_delivery
            )
        if n % _POLL_EVERY == 0:
            poll(0)


def produce_records(
    producer: Any, records: Iterable[OutputRecord], done: int, on_delivery: Any
) -> None:
    poll = producer.poll
    for n, (topic, partition, key, value, ts, headers) in enumerate(records, done + 1):
        part = -1 if partition is None else partition  # -1: the producer's partitioner
        produce_with_retry(
            producer,
            topic,
            value,
            key,
            partition=part,
            timestamp=ts or 0,  # 0: now
            headers=headers,
            on_delivery=on_delivery,
        )
        if n % _POLL_EVERY == 0:
            poll(0)


class AtLeastOnceSink(Sink):
    """At-least-once sink: produce eagerly (idempotent producer), flush at the barrier.

    A worker's sink tasks share its one producer (``producer``: the one that writes
    its internal topics), so a worker with hundreds of tasks has one client, not one
    per task; each sink still counts only its own records' failed deliveries. Given
    ``bootstrap`` instead, the sink makes a producer of its own."""

    guarantee = Guarantee.AT_LEAST_ONCE

    def __init__(
        self,
        task: str,
        bootstrap: str | None = None,
        *,
        producer: Any = None,
        producer_config: Mapping[str, Any] | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.task = task
        self.timeout = timeout
        if producer is None:
            if bootstrap is None:
                raise ValueError("AtLeastOnceSink needs a producer or a bootstrap address")
            # Delivery reports for failures only: a Python callback per delivered
            # record would cost more than producing it.
            producer = make_producer(
                bootstrap,
                extra={
                    "delivery.report.only.error": True,
                    "linger.ms": 20,
                    **(producer_config or {}),
                },
            )
        self._producer = producer
        self.failed = 0
        self.first_error: str | None = None
        self.produced = 0

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failed += 1
            if self.first_error is None:
                self.first_error = f"{msg.topic()}[{msg.partition()}]: {err}"

    def write(self, record: OutputRecord) -> None:
        produce_chunks(self._producer, ([record],), self._on_delivery)
        self.produced += 1
        if self.produced % _POLL_EVERY == 0:
            self._producer.poll(0)

    def write_batch(self, records: Iterable[OutputRecord]) -> None:
        records = list(records)
        produce_chunks(self._producer, (records,), self._on_delivery)
        self.produced += len(records)
        self._producer.poll(0)

    def write_columns(
        self,
        topic: str,
        keys: list[bytes | None],
        values: list[bytes | None],
        timestamps: list[int],
    ) -> None:
        produce_chunks(
            self._producer, (ColumnBatch(topic, keys, values, timestamps),), self._on_delivery
        )
        self.produced += len(keys)
        self._producer.poll(0)

    def on_barrier(self, checkpoint_id: int) -> None:
        """Flush; raises SinkDeliveryError if anything could not be delivered."""
        self.flush(f"barrier {checkpoint_id}")

    def flush(self, why: str = "flush") -> None:
        """Wait until every record is delivered; SinkDeliveryError if any failed or timed out."""
        left = self._producer.flush(self.timeout)
        if left or self.failed:
            failed, first = self.failed, self.first_error
            self.failed, self.first_error = 0, None
            raise SinkDeliveryError(
                f"sink {self.task} at {why}: {failed} records failed and {left} still "
                f"undelivered after {self.timeout}s (first error: {first})"
            )

    def buffer_blob(self) -> bytes | None:
        return None  # at-least-once output is flushed at the barrier: nothing to keep

    def on_checkpoint_completed(self, checkpoint_id: int) -> int:
        return 0  # already produced and flushed at the barrier

    def recover(self, blob: bytes | None, attempt: int) -> int:
        """Nothing is buffered; the replay after a restore may duplicate records."""
        self.failed, self.first_error = 0, None
        return 0

    def close(self) -> None:
        self._producer.flush(self.timeout)
