"""What the worker feeds a task and what it drains from it.

Inputs: source records are plain tuples ``(key_bytes, value_bytes, timestamp_ms,
offset)``; internal-topic items are ``InternalRecord`` or ``InternalEvent`` (the
worker decodes the producing task and attempt from the headers).

Outputs, in order: ``OutputBatch`` (serialized data for one topic), ``OutputEvent``
(a stream event for every partition of an internal topic, or an epoch marker for a
sink), ``DeadLetter`` (undecodable input for ``<app>.dlq``), ``SnapshotPoint`` (the
state at this point belongs to a checkpoint, or is a bounded run's final state) and
``AlignmentAborted`` (a checkpoint this task will not acknowledge).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from kstream.elements.events import StreamEvent

SourceRecord = tuple[bytes | None, bytes | None, int, int]
"""``(key, value, timestamp_ms, offset)`` as read from a user topic."""


class InternalRecord(NamedTuple):
    """A data record from an internal topic; ``writer`` and ``seq``: who wrote it and
    its sequence number on the partition (None: not known, nothing to deduplicate)."""

    upstream: str
    attempt: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    writer: str | None = None
    seq: int | None = None


class InternalEvent(NamedTuple):
    """A stream event from an internal topic (``writer``, ``seq``: as a record's)."""

    upstream: str
    attempt: int
    offset: int
    event: StreamEvent
    writer: str | None = None
    seq: int | None = None


class OutputBatch(NamedTuple):
    """Serialized records for ``topic``; ``partitions`` is ``None`` for sinks (Kafka
    chooses) and one partition per record for internal topics."""

    topic: str
    internal: bool
    partitions: list[int] | None
    keys: list[bytes | None]
    values: list[bytes | None]
    timestamps: list[int]


class OutputEvent(NamedTuple):
    """``event`` for every partition of ``topic`` (internal) or as a sink epoch marker."""

    topic: str
    internal: bool
    event: StreamEvent


class DeadLetter(NamedTuple):
    """An input record that could not be decoded, with the reason."""

    topic: str
    partition: int
    offset: int
    reason: str
    key: bytes | None
    value: bytes | None
    timestamp: int | None = None  # the record's Kafka timestamp (ms), if it had one
    operator: str | None = None  # the operator whose function raised (on_error=dead_letter)


Position = int | None | Mapping[str, int]
"""Where to resume an input: the next offset of a user-topic partition (``None``:
the job's start position), or per upstream task the next offset of its records in an
internal partition."""


@dataclass(frozen=True)
class SnapshotPoint:
    """The task's state right now is checkpoint ``checkpoint_id`` (``None`` with
    ``final=True``: the final state of a bounded run); restore inputs from
    ``positions`` keyed by ``(topic, partition)``."""

    task_id: str
    checkpoint_id: int | None
    attempt: int
    positions: Mapping[tuple[str, int], Position]
    final: bool = False
    # Input watermarks (topic, partition, upstream task or ""): part of the state, so a
    # restored task judges the records it reads again as the failure-free run did.
    watermarks: Mapping[tuple[str, int, str], int] = field(default_factory=dict)


class AlignmentAborted(NamedTuple):
    """Barrier ``checkpoint_id`` was overtaken by a newer one before it aligned."""

    checkpoint_id: int
    reason: str


Output = OutputBatch | OutputEvent | DeadLetter | SnapshotPoint | AlignmentAborted
