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
    ks.operator   only for a record a user function raised on (on_error=dead_letter):
                  the operator's name; ks.offset is then -1 (and for a timer
                  callback ks.topic is empty, ks.partition -1: the value describes
                  the timer, see kstream.elements.errors)
    ks.truncated  only on a truncated dead letter: what was cut, e.g.
                  ``value 5242880 -> 65536 bytes``

**Sizes.** The topic is created with ``max.message.bytes`` at least that of every
source topic plus room for the headers (:func:`dlq_topic_spec`), and the writer's
producer accepts records up to ``MAX_PRODUCE_BYTES``. A dead letter the topic or
the producer still refuses as too large (an existing smaller topic, a record over
the producer limit) is written again with key and value cut to
``TRUNCATED_BYTES`` and the ``ks.truncated`` header: never dropped, never a job
failure, and written once.

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
import time
from collections import Counter
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from kstream.config import OnBadRecord
from kstream.kafka.clients import (
    KafkaError,
    KafkaException,
    TopicSpec,
    make_producer,
    produce_with_retry,
)
from kstream.names import dlq_topic

__all__ = [
    "HEADER_ERROR",
    "HEADER_OFFSET",
    "HEADER_OPERATOR",
    "HEADER_PARTITION",
    "HEADER_TIMESTAMP",
    "HEADER_TOPIC",
    "HEADER_TRUNCATED",
    "BadRecordError",
    "DeadLetterError",
    "DeadLetterWriter",
    "dlq_topic_spec",
]

log = logging.getLogger(__name__)

LOG_EVERY_S = 60.0  # while bad records keep coming: one summary line a minute

HEADER_ERROR = "ks.error"
HEADER_TOPIC = "ks.topic"
HEADER_PARTITION = "ks.partition"
HEADER_OFFSET = "ks.offset"
HEADER_TIMESTAMP = "ks.timestamp"
HEADER_TRUNCATED = "ks.truncated"
HEADER_OPERATOR = "ks.operator"

MAX_REASON_BYTES = 4096  # a reason is diagnostics, not a payload
HEADER_ROOM_BYTES = 64 * 1024  # the dead letter's headers and record overhead on top
TRUNCATED_BYTES = 64 * 1024  # what a too-large dead letter keeps of its key and value
MAX_PRODUCE_BYTES = 64 * 1024 * 1024  # the writer's producer limit (librdkafka message.max.bytes)


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


def dlq_topic_spec(
    app: str, partitions: int = 1, source_max_message_bytes: int | None = None
) -> TopicSpec:
    """The ``<app>.dlq`` topic (default retention: it is diagnostics, not state).

    ``source_max_message_bytes``: the largest ``max.message.bytes`` of the source
    topics; the dead-letter topic takes that plus room for the headers, so any record
    a source delivers fits.
    """
    config = (
        None
        if source_max_message_bytes is None
        else {"max.message.bytes": str(source_max_message_bytes + HEADER_ROOM_BYTES)}
    )
    return TopicSpec(dlq_topic(app), partitions, config)


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
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.topic = dlq_topic(app)
        self.mode = mode
        self.timeout = timeout
        self._producer = (
            make_producer(
                bootstrap,
                extra={
                    "delivery.report.only.error": True,
                    **(producer_config or {}),
                    "message.max.bytes": MAX_PRODUCE_BYTES,
                },
            )
            if mode is OnBadRecord.DEAD_LETTER
            else None
        )
        self.count = 0  # dead letters queued by this writer
        self.by_topic: Counter[str] = Counter()
        self._logged = 0  # dead letters counted in the last log line
        self._clock = clock
        self._logged_at: float | None = None  # the first is logged at once, then a minute's
        self._failed = 0
        self._first_error: str | None = None
        # refused as too large: (key, value, headers, send again unchanged)
        self._too_large: list[tuple[bytes | None, bytes | None, list[Any], bool]] = []
        self.truncated = 0  # dead letters written truncated

    def _on_delivery(self, headers: list[Any], resent: bool, err: Any, msg: Any) -> None:
        if err is None:
            return
        if err.code() == KafkaError.MSG_SIZE_TOO_LARGE and not _is_truncated(headers):
            # The broker refuses a whole batch: small records in it are sent again as
            # they are, a record refused again (or a large one) is truncated. (A
            # delivery report carries no headers: they come with the callback.)
            key, value = msg.key(), msg.value()
            small = len(key or b"") + len(value or b"") <= TRUNCATED_BYTES
            self._too_large.append((key, value, headers, small and not resent))
            return
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
        operator: str | None = None,
    ) -> None:
        """Dead-letter one bad record, or raise BadRecordError in FAIL mode. ``operator``:
        the operator whose function raised on it (``ks.operator``; on_error=dead_letter)."""
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
        if operator is not None:
            headers.append((HEADER_OPERATOR, operator.encode()))
        self._produce(key, value, headers)
        self.count += 1
        self.by_topic[topic] += 1

    def _produce(
        self, key: bytes | None, value: bytes | None, headers: list[Any], resent: bool = False
    ) -> None:
        assert self._producer is not None
        while True:
            try:
                produce_with_retry(
                    self._producer,
                    self.topic,
                    value,
                    key,
                    headers=headers,
                    on_delivery=partial(self._on_delivery, headers, resent),
                )
                break
            except KafkaException as e:
                if e.args[0].code() != KafkaError.MSG_SIZE_TOO_LARGE or _is_truncated(headers):
                    raise DeadLetterError(f"dead-letter topic {self.topic}: {e}") from e
                key, value, headers = _truncate(key, value, headers)
                self.truncated += 1
        self._producer.poll(0)

    def _resend_too_large(self) -> None:
        """Write the dead letters the broker refused as too large again (module doc)."""
        refused, self._too_large = self._too_large, []
        for key, value, headers, unchanged in refused:
            if unchanged:
                self._produce(key, value, headers, resent=True)
            else:
                self._produce(*_truncate(key, value, headers))
                self.truncated += 1

    def flush(self) -> None:
        """Wait for every dead letter; DeadLetterError if any failed. Logs new dead letters."""
        if self._producer is None:
            return
        # Nothing queued and no delivery report unserved (len(): librdkafka's outq_len
        # counts both): no flush, whose return takes the GIL back from other threads.
        left = self._producer.flush(self.timeout) if len(self._producer) else 0
        for _round in range(3):  # unchanged, then truncated, then truncated of the headers
            if not self._too_large:
                break
            self._resend_too_large()
            left = self._producer.flush(self.timeout)
        self._log_summary()
        if left or self._failed:
            failed, first = self._failed, self._first_error
            self._failed, self._first_error = 0, None
            raise DeadLetterError(
                f"dead-letter topic {self.topic}: {failed} records failed and {left} still "
                f"undelivered after {self.timeout}s (first error: {first})"
            )

    def _log_summary(self, final: bool = False) -> None:
        """One WARNING for the first dead letters, then at most one a minute while bad
        records keep coming (not one a second), and a last one at close."""
        now = self._clock()
        if self.count == self._logged:
            return
        if not final and self._logged_at is not None and now - self._logged_at < LOG_EVERY_S:
            return
        since = ""
        if self._logged_at is not None:
            since = f", {self.count - self._logged} in the last {now - self._logged_at:.0f} s"
        log.warning(
            "%d records sent to dead-letter topic %s since start%s (%s)",
            self.count,
            self.topic,
            since,
            ", ".join(f"{t}: {n}" for t, n in sorted(self.by_topic.items())),
        )
        self._logged, self._logged_at = self.count, now

    def close(self) -> None:
        """Flush what is queued and release the producer."""
        if self._producer is not None:
            self.flush()
            self._producer = None
        self._log_summary(final=True)


def _is_truncated(headers: list[Any] | None) -> bool:
    return any(name == HEADER_TRUNCATED for name, _v in headers or ())


def _truncate(
    key: bytes | None, value: bytes | None, headers: list[Any]
) -> tuple[bytes | None, bytes | None, list[Any]]:
    """Key and value cut to ``TRUNCATED_BYTES``, with a header saying what was cut."""
    cut = []
    if key is not None and len(key) > TRUNCATED_BYTES:
        cut.append(f"key {len(key)} -> {TRUNCATED_BYTES} bytes")
        key = key[:TRUNCATED_BYTES]
    if value is not None and len(value) > TRUNCATED_BYTES:
        cut.append(f"value {len(value)} -> {TRUNCATED_BYTES} bytes")
        value = value[:TRUNCATED_BYTES]
    note = ", ".join(cut) or "nothing (the headers alone were too large)"
    kept = [(n, v) for n, v in headers if n != HEADER_ERROR]
    reason = next((v for n, v in headers if n == HEADER_ERROR), b"")
    if not cut:  # only the reason can be long: keep its start
        reason = reason[:1024]
    return key, value, [(HEADER_ERROR, reason), *kept, (HEADER_TRUNCATED, note.encode())]
