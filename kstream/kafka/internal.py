"""Record format of internal repartition topics (docs/design.md §2, §3).

Every record on ``<app>.<stage>.repartition`` carries two headers naming who wrote
it: ``ks.task`` (the producing task id) and ``ks.attempt`` (its attempt, decimal).
A consumer restored to attempt *k* drops records of attempts older than *k*
(:func:`is_stale`): they are the failed attempt's output and are produced again.

A worker's producer writes each task's records with ``ks.writer`` (random per task and
attempt: one producer session of it) and ``ks.seq``, which counts that writer's records and
events on each partition from 0. The idempotent producer can still write a record twice
(when a broker leaves with a batch in flight, seen in rolling restarts: Kafka deduplicates
only within one producer epoch), so a reader drops a record whose writer it has already
seen at that sequence number or a later one (``Task``; records without them, from older
writers, are taken as they are).

A data record's event time is its Kafka timestamp, except where that cannot hold it:
librdkafka writes a timestamp of 0 as "now" (and Kafka has no negative ones), so a
record at event time 0 or less carries it in a ``ks.time`` header (decimal), which the
reader takes instead (:func:`time_headers`; readers before it ignore the header).

Stream events (barrier, watermark, end of input) are ordinary records with an
extra ``ks.event`` header naming the kind, a null key and a small JSON value::

    {"v": 1, "checkpoint_id": 7, "attempt": 2, "timestamp": 1700000000000}

A watermark may add ``"judged"``: the records after it were judged late against that
watermark, ahead of its ``timestamp`` (``Watermark.judged``); readers before it ignore
the field (they judge those records against the timestamp, as before).

An event is written to EVERY partition of the internal topic
(:func:`produce_event`), so each downstream task sees it on each of its inputs.

The events are the runtime's own (:mod:`kstream.elements.events`): this module encodes
them and validates what it reads: a malformed header or value raises
:class:`InternalRecordError` with the reason. Nothing read here is ever executed or
unpickled.

Barriers and watermarks of several tasks of one worker travel in one record per
partition (:mod:`kstream.kafka.eventsets`); a partition's batch is decoded into records
and events by :mod:`kstream.kafka.internal_batch`; delivery failures:
:mod:`kstream.kafka.delivery`.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from kstream.elements.events import Barrier, EndOfInput, StreamEvent, Watermark

__all__ = [
    "HEADER_ATTEMPT",
    "HEADER_EVENT",
    "HEADER_SEQ",
    "HEADER_TASK",
    "HEADER_TIME",
    "HEADER_WRITER",
    "EventKind",
    "Headers",
    "InternalRecordError",
    "RecordOrigin",
    "check_id",
    "data_headers",
    "decode_event",
    "encode_event",
    "is_stale",
    "new_writer",
    "produce_event",
    "produce_on",
    "read_origin",
    "seq_header",
    "time_headers",
]

HEADER_TASK = "ks.task"
HEADER_ATTEMPT = "ks.attempt"
HEADER_EVENT = "ks.event"
HEADER_TIME = "ks.time"
HEADER_WRITER = "ks.writer"
HEADER_SEQ = "ks.seq"

FORMAT_VERSION = 1
MAX_EVENT_VALUE_BYTES = 4096  # an event value is tiny; a larger one is malformed
MAX_ID_LEN = 256
MAX_WRITER_LEN = 64

Headers = Sequence[tuple[str, bytes | None]]


class InternalRecordError(ValueError):
    """An internal-topic record has malformed ``ks.*`` headers or event value."""


class EventKind(StrEnum):
    """Kinds of stream event carried on internal topics (docs/design.md §3)."""

    BARRIER = "barrier"
    BARRIERS = "barriers"  # one checkpoint's barriers of several tasks (kstream.kafka.eventsets)
    WATERMARKS = "watermarks"  # the watermarks of several tasks (kstream.kafka.eventsets)
    WATERMARK = "watermark"
    END_OF_INPUT = "end_of_input"

    @property
    def requires_pipelined(self) -> bool:
        """Whether meeting this event in a bounded (batch) run is a misconfiguration."""
        return _EVENT_CLASS[self].requires_pipelined

    @classmethod
    def of(cls, event: StreamEvent) -> EventKind:
        """The kind of a runtime stream event."""
        if isinstance(event, Barrier):
            return cls.BARRIER
        if isinstance(event, Watermark):
            return cls.WATERMARK
        return cls.END_OF_INPUT


_EVENT_CLASS: dict[EventKind, type[StreamEvent]] = {
    EventKind.BARRIER: Barrier,
    EventKind.BARRIERS: Barrier,
    EventKind.WATERMARKS: Watermark,
    EventKind.WATERMARK: Watermark,
    EventKind.END_OF_INPUT: EndOfInput,
}


@dataclass(frozen=True, slots=True)
class RecordOrigin:
    """Who wrote an internal-topic record, and the event kind if it is an event;
    ``time``: the event time from ``ks.time`` (None: the Kafka timestamp is it);
    ``writer``, ``seq``: its writer's session and sequence number on the partition (None:
    written before they existed)."""

    task: str
    attempt: int
    event: EventKind | None
    time: int | None = None
    writer: str | None = None
    seq: int | None = None


def check_id(task: str) -> None:
    if not task or len(task) > MAX_ID_LEN:
        raise InternalRecordError(f"task id must be 1..{MAX_ID_LEN} characters, got {task!r}")


def new_writer() -> str:
    """A writer id: one task's records in one attempt on one worker (16 hex digits)."""
    return secrets.token_hex(8)


def data_headers(task: str, attempt: int, writer: str | None = None) -> list[tuple[str, bytes]]:
    """Headers for a data record written by ``task`` in ``attempt`` (by ``writer``: then
    each record adds its :func:`seq_header`).

    Build them once per task and attempt and reuse the list for every record.
    """
    check_id(task)
    if attempt < 0:
        raise InternalRecordError(f"attempt must be >= 0, got {attempt}")
    headers = [(HEADER_TASK, task.encode()), (HEADER_ATTEMPT, str(attempt).encode())]
    if writer is not None:
        _check_writer(writer)
        headers.append((HEADER_WRITER, writer.encode()))
    return headers


def seq_header(seq: int) -> tuple[str, bytes]:
    """The ``ks.seq`` header of a writer's ``seq``-th record or event on a partition."""
    return (HEADER_SEQ, b"%d" % seq)


def _check_writer(writer: str) -> None:
    if not 1 <= len(writer) <= MAX_WRITER_LEN or not writer.isascii():
        raise InternalRecordError(
            f"writer id must be 1..{MAX_WRITER_LEN} ASCII characters, got {writer!r:.80}"
        )


def time_headers(headers: list[tuple[str, bytes]], timestamp: int) -> list[tuple[str, bytes]]:
    """``headers`` of a data record at event time ``timestamp`` <= 0, which its Kafka
    timestamp cannot carry: with ``ks.time`` added."""
    return [*headers, (HEADER_TIME, str(timestamp).encode())]


def encode_event(
    task: str, attempt: int, event: StreamEvent, writer: str | None = None
) -> tuple[list[tuple[str, bytes]], bytes]:
    """Headers and value of the record that carries ``event``, written by ``task`` in
    ``attempt`` (by ``writer``; key is null). A barrier is of the writer's attempt."""
    kind = EventKind.of(event)
    headers = [*data_headers(task, attempt, writer), (HEADER_EVENT, kind.value.encode())]
    body: dict[str, Any] = {"v": FORMAT_VERSION, "attempt": attempt}
    if isinstance(event, Barrier):
        body["checkpoint_id"] = event.checkpoint_id
    if isinstance(event, Barrier | Watermark):
        body["timestamp"] = event.timestamp
    if isinstance(event, Watermark) and event.judged is not None:
        body["judged"] = event.judged
    return headers, json.dumps(body, separators=(",", ":")).encode()


def _text(name: str, raw: bytes | None) -> str:
    if raw is None:
        raise InternalRecordError(f"header {name} has no value")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InternalRecordError(f"header {name} is not UTF-8: {e}") from e


def _non_negative_int(name: str, text: str) -> int:
    if not text.isascii() or not text.isdigit() or len(text) > 19:
        raise InternalRecordError(f"{name} must be a non-negative decimal integer, got {text!r}")
    return int(text)


def _time(name: str, text: str) -> int:
    digits = text[1:] if text.startswith("-") else text
    value = int(text) if digits.isascii() and digits.isdigit() and len(digits) <= 19 else None
    if value is None or not -(2**63) <= value < 2**63:
        raise InternalRecordError(f"{name} must be a 64-bit decimal integer, got {text!r}")
    return value


def read_origin(headers: Headers | None) -> RecordOrigin:
    """The validated ``ks.*`` headers of an internal-topic record.

    Raises InternalRecordError when ``ks.task`` or ``ks.attempt`` is missing or
    malformed, when a ``ks.*`` header repeats, or when ``ks.event`` names an
    unknown kind. Other headers are ignored (user headers pass through).
    """
    task: str | None = None
    attempt: int | None = None
    event: EventKind | None = None
    time: int | None = None
    writer: str | None = None
    seq: int | None = None
    seen: set[str] = set()
    for name, raw in headers or ():
        if not name.startswith("ks."):
            continue
        if name in seen:
            raise InternalRecordError(f"header {name} appears more than once")
        seen.add(name)
        if name == HEADER_TASK:
            task = _text(name, raw)
            check_id(task)
        elif name == HEADER_ATTEMPT:
            attempt = _non_negative_int(name, _text(name, raw))
        elif name == HEADER_EVENT:
            kind = _text(name, raw)
            try:
                event = EventKind(kind)
            except ValueError:
                raise InternalRecordError(f"unknown event kind {kind!r} in {name}") from None
        elif name == HEADER_TIME:
            time = _time(name, _text(name, raw))
        elif name == HEADER_WRITER:
            writer = _text(name, raw)
            _check_writer(writer)
        elif name == HEADER_SEQ:
            seq = _non_negative_int(name, _text(name, raw))
    if task is None or attempt is None:
        raise InternalRecordError(
            f"internal record lacks {HEADER_TASK}/{HEADER_ATTEMPT} headers "
            f"(has {sorted(seen) or 'none'}): not written by a kstream task"
        )
    if (writer is None) != (seq is None):
        raise InternalRecordError(f"headers {HEADER_WRITER} and {HEADER_SEQ} come together")
    return RecordOrigin(task, attempt, event, time, writer, seq)


def decode_event(origin: RecordOrigin, value: bytes | None) -> StreamEvent:
    """The event carried by a record whose headers gave ``origin`` (with ``event`` set).

    Raises InternalRecordError on a malformed value or one that disagrees with the
    headers.
    """
    if origin.event is None:
        raise InternalRecordError("record is a data record, not an event")
    if origin.event in (EventKind.BARRIERS, EventKind.WATERMARKS):
        raise InternalRecordError(f"a set of {origin.event} holds several events: decode_set")
    if value is None or len(value) > MAX_EVENT_VALUE_BYTES:
        raise InternalRecordError(
            f"{origin.event} event value must be 1..{MAX_EVENT_VALUE_BYTES} bytes of JSON"
        )
    try:
        body = json.loads(value)
    except (UnicodeDecodeError, ValueError) as e:
        raise InternalRecordError(f"{origin.event} event value is not JSON: {e}") from e
    if not isinstance(body, dict) or body.get("v") != FORMAT_VERSION:
        raise InternalRecordError(
            f"{origin.event} event value must be an object with v={FORMAT_VERSION}: {body!r:.200}"
        )
    if body.get("attempt") != origin.attempt:
        raise InternalRecordError(
            f"event attempt {body.get('attempt')!r} disagrees with header {origin.attempt}"
        )
    fields: dict[str, int | None] = {}
    for name in ("checkpoint_id", "timestamp"):
        v = body.get(name)
        # Timestamps may be negative: a watermark before any record is far in the past.
        if v is not None and (type(v) is not int or (name == "checkpoint_id" and v < 0)):
            raise InternalRecordError(
                f"event {name} must be an integer (checkpoint ids >= 0), got {v!r}"
            )
        fields[name] = v
    kind, checkpoint_id, timestamp = origin.event, fields["checkpoint_id"], fields["timestamp"]
    needs_cp = kind is EventKind.BARRIER
    if needs_cp != (checkpoint_id is not None):
        raise InternalRecordError(
            f"{kind} event {'needs' if needs_cp else 'must not have'} a checkpoint_id"
        )
    needs_ts = kind in (EventKind.BARRIER, EventKind.WATERMARK)
    if needs_ts != (timestamp is not None):
        raise InternalRecordError(
            f"{kind} event {'needs' if needs_ts else 'must not have'} a timestamp"
        )
    if kind is EventKind.BARRIER:
        assert checkpoint_id is not None and timestamp is not None
        return Barrier(checkpoint_id, origin.attempt, timestamp)
    if kind is EventKind.WATERMARK:
        assert timestamp is not None
        judged = body.get("judged")
        if judged is not None and type(judged) is not int:
            raise InternalRecordError(f"watermark judged must be an integer, got {judged!r}")
        return Watermark(timestamp, judged)
    return EndOfInput()


def is_stale(record_attempt: int, current_attempt: int) -> bool:
    """Whether a record read after the restored offsets belongs to a failed attempt.

    Records of older attempts are dropped: the restored job produces them again.
    """
    return record_attempt < current_attempt


def produce_event(
    producer: Any,
    topic: str,
    partitions: int,
    task: str,
    attempt: int,
    event: StreamEvent,
    on_delivery: Callable[[Any, Any], None] | None = None,
    *,
    writer: str | None = None,
    seqs: list[int] | None = None,
) -> None:
    """Queue ``event`` of ``task`` in ``attempt`` on every one of the ``partitions``
    partitions of ``topic`` (``on_delivery``: the records' delivery callback; ``writer``
    with ``seqs``: its next sequence number on each partition, advanced here).

    Delivery is the producer's: the worker's acknowledgements wait until everything it
    wrote is delivered (``Router.internal_delivered``). Events go through the same
    producer as the task's data records, so each partition receives them in order
    after the data written before them.
    """
    if partitions < 1:
        raise ValueError(f"topic {topic} needs at least one partition, got {partitions}")
    if (writer is None) != (seqs is None):
        raise ValueError("a writer's events need its sequence numbers, and only its")
    headers, value = encode_event(task, attempt, event, writer)
    produce_on(producer, topic, range(partitions), headers, value, on_delivery, seqs)
    producer.poll(0)


def produce_on(
    producer: Any,
    topic: str,
    partitions: Iterable[int],
    headers: list[tuple[str, bytes]],
    value: bytes,
    on_delivery: Callable[[Any, Any], None] | None = None,
    seqs: list[int] | None = None,
) -> None:
    """Queue one keyless record of ``headers`` and ``value`` on each of ``partitions``
    of ``topic``; with ``seqs`` (its writer's next sequence number on each partition,
    advanced here) each gets its ``ks.seq`` header."""
    for p in partitions:
        h = headers
        if seqs is not None:
            h = [*headers, seq_header(seqs[p])]
            seqs[p] += 1
        producer.produce(
            topic, value=value, key=None, partition=p, headers=h, on_delivery=on_delivery
        )
