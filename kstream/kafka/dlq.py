"""Dead-letter topic for records a source cannot decode.

A record whose bytes the source serde rejects is never silently dropped: it goes
to ``<app>.dlq`` unchanged (original key and value bytes) with headers saying
why and where it came from, or, with ``OnBadRecord.FAIL``, the job stops with
:class:`BadRecordError` naming topic, partition, offset and reason.

Headers of a dead letter (all UTF-8 text)::

    ks.error      the serde's reason
    ks.topic      source topic
    ks.partition  source partition (decimal)
    ks.offset     source offset (decimal)
    ks.timestamp  source record timestamp in ms (decimal; -1 if it had none)

**Guarantee: at-least-once.** Dead letters are produced eagerly by an idempotent,
non-transactional producer and flushed at every barrier before the task
acknowledges (``flush``), so every bad record below a checkpoint's source offsets
is in the topic once that checkpoint completes. After a restore the source
re-reads records past the checkpoint offsets and may dead-letter some again:
``(ks.topic, ks.partition, ks.offset)`` identifies a bad record uniquely, so a
DLQ reader can drop such repeats. Putting dead letters in the sink transaction
instead would tie diagnostics of poison records to checkpoint completion (none
visible while checkpoints fail — when they are most needed).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from typing import Any

from kstream.config import OnBadRecord
from kstream.kafka.clients import TopicSpec, make_producer, produce_with_retry
from kstream.names import dlq_topic

__all__ = [
    "HEADER_ERROR",
    "HEADER_OFFSET",
    "HEADER_PARTITION",
    "HEADER_TIMESTAMP",
    "HEADER_TOPIC",
    "BadRecordError",
    "DeadLetterError",
    "DeadLetterWriter",
    "dlq_topic_spec",
]

log = logging.getLogger(__name__)

HEADER_ERROR = "ks.error"
HEADER_TOPIC = "ks.topic"
HEADER_PARTITION = "ks.partition"
HEADER_OFFSET = "ks.offset"
HEADER_TIMESTAMP = "ks.timestamp"

MAX_REASON_BYTES = 4096  # a reason is diagnostics, not a payload


class BadRecordError(RuntimeError):
    """A source record could not be decoded and the job is configured to stop on it."""

    def __init__(self, topic: str, partition: int, offset: int, reason: str) -> None:
        self.topic, self.partition, self.offset, self.reason = topic, partition, offset, reason
        super().__init__(
            f"kstream: cannot decode record {topic}[{partition}]@{offset}: {reason}. "
            f"on_bad_record=fail stops the job; use on_bad_record=dead_letter to send such "
            f"records to the dead-letter topic and keep going"
        )


class DeadLetterError(RuntimeError):
    """Dead letters could not be delivered; the task must not acknowledge its checkpoint."""


def dlq_topic_spec(app: str, partitions: int = 1) -> TopicSpec:
    """The ``<app>.dlq`` topic (default retention: it is diagnostics, not state)."""
    return TopicSpec(dlq_topic(app), partitions)


class DeadLetterWriter:
    """Sends undecodable source records to ``<app>.dlq`` (or raises, in FAIL mode).

    One per worker is enough; it is not thread-safe. ``flush`` at each barrier.
    """

    def __init__(
        self,
        app: str,
        bootstrap: str,
        mode: OnBadRecord = OnBadRecord.DEAD_LETTER,
        *,
        producer_config: Mapping[str, Any] | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.topic = dlq_topic(app)
        self.mode = mode
        self.timeout = timeout
        self._producer = (
            make_producer(
                bootstrap, extra={"delivery.report.only.error": True, **(producer_config or {})}
            )
            if mode is OnBadRecord.DEAD_LETTER
            else None
        )
        self.count = 0  # dead letters queued by this writer
        self.by_topic: Counter[str] = Counter()
        self._logged = 0
        self._failed = 0
        self._first_error: str | None = None

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self._failed += 1
            if self._first_error is None:
                self._first_error = str(err)

    def handle(
        self,
        topic: str,
        partition: int,
        offset: int,
        timestamp_ms: int | None,
        key: bytes | None,
        value: bytes | None,
        reason: str,
    ) -> None:
        """Dead-letter one bad record, or raise BadRecordError in FAIL mode."""
        if self.mode is OnBadRecord.FAIL:
            raise BadRecordError(topic, partition, offset, reason)
        if self._producer is None:
            raise DeadLetterError(f"dead-letter writer for {self.topic} is closed")
        reason_bytes = reason.encode("utf-8", "replace")[:MAX_REASON_BYTES]
        headers: list[tuple[str, str | bytes | None]] = [
            (HEADER_ERROR, reason_bytes),
            (HEADER_TOPIC, topic.encode()),
            (HEADER_PARTITION, str(partition).encode()),
            (HEADER_OFFSET, str(offset).encode()),
            (HEADER_TIMESTAMP, str(-1 if timestamp_ms is None else timestamp_ms).encode()),
        ]
        produce_with_retry(
            self._producer, self.topic, value, key, headers=headers, on_delivery=self._on_delivery
        )
        self._producer.poll(0)
        self.count += 1
        self.by_topic[topic] += 1

    def flush(self) -> None:
        """Wait for every dead letter; DeadLetterError if any failed. Logs new dead letters."""
        if self._producer is None:
            return
        left = self._producer.flush(self.timeout)
        if self.count != self._logged:
            log.warning(
                "%d records sent to dead-letter topic %s since start (%s)",
                self.count,
                self.topic,
                ", ".join(f"{t}: {n}" for t, n in sorted(self.by_topic.items())),
            )
            self._logged = self.count
        if left or self._failed:
            failed, first = self._failed, self._first_error
            self._failed, self._first_error = 0, None
            raise DeadLetterError(
                f"dead-letter topic {self.topic}: {failed} records failed and {left} still "
                f"undelivered after {self.timeout}s (first error: {first})"
            )

    def close(self) -> None:
        """Flush what is queued and release the producer."""
        if self._producer is not None:
            self.flush()
            self._producer = None
