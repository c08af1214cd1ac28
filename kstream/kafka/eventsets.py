"""Stream events of several tasks in one internal record (docs/design.md §3, §5.3).

Every upstream task sends its barriers and watermarks to every partition of its
internal topics. One record per task and partition is P_up x P_down records per
checkpoint — 1 048 576 at 1 024 partitions, five times the whole input of the
benchmark that found it (benchmarks/SCALING.md) — and as many per watermark step. A
worker's tasks write through one producer, so the worker writes one record per
partition for the events of many of its tasks (``kstream.worker.eventsets`` says when),
and a reader takes it as each listed task's own event at the record's offset::

    headers: ks.task (the first task), ks.attempt, ks.writer, ks.seq,
             ks.event = "barriers" | "watermarks"
    value:   {"v": 1, "attempt": 2, "tasks": ["stage0-0", "stage0-3"],
              "timestamps": [1700000000000, 1700000000250],
              "checkpoint_id": 7}            (barriers: one checkpoint for all)
              "judged": [null, 1700000000300] (watermarks, when one has it)

A set holds at most ``MAX_SET_TASKS`` tasks, each once, all of one attempt. Readers
before this format do not know the kinds: a job is upgraded to it through a savepoint
(docs/operations.md).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from kstream.elements.events import Barrier, StreamEvent, Watermark
from kstream.kafka.internal import (
    FORMAT_VERSION,
    HEADER_EVENT,
    EventKind,
    InternalRecordError,
    RecordOrigin,
    check_id,
    data_headers,
)

__all__ = ["MAX_SET_BYTES", "MAX_SET_TASKS", "SET_KINDS", "decode_set", "encode_set"]

MAX_SET_TASKS = 2048  # tasks per record (~60 KB of JSON)
MAX_SET_BYTES = 512 * 1024
SET_KINDS = frozenset({EventKind.BARRIERS, EventKind.WATERMARKS})


def encode_set(
    tasks: Sequence[str], events: Sequence[Barrier] | Sequence[Watermark], attempt: int, writer: str
) -> tuple[list[tuple[str, bytes]], bytes]:
    """Headers (without ``ks.seq``) and value of the record carrying ``events[i]`` of
    ``tasks[i]``, all barriers of one checkpoint or all watermarks, in ``attempt``."""
    if not tasks or len(tasks) != len(events) or len(tasks) > MAX_SET_TASKS:
        raise InternalRecordError(f"a set needs 1..{MAX_SET_TASKS} tasks, each with its event")
    body: dict[str, Any] = {"v": FORMAT_VERSION, "attempt": attempt, "tasks": list(tasks)}
    body["timestamps"] = [e.timestamp for e in events]
    if all(isinstance(e, Barrier) for e in events):
        kind = EventKind.BARRIERS
        ids = {e.checkpoint_id for e in events if isinstance(e, Barrier)}
        if len(ids) != 1:
            raise InternalRecordError(f"a set's barriers are of one checkpoint, got {sorted(ids)}")
        body["checkpoint_id"] = ids.pop()
    elif all(isinstance(e, Watermark) for e in events):
        kind = EventKind.WATERMARKS
        judged = [e.judged for e in events if isinstance(e, Watermark)]
        if any(j is not None for j in judged):
            body["judged"] = judged
    else:
        raise InternalRecordError("a set holds barriers or watermarks, not both")
    headers = [*data_headers(tasks[0], attempt, writer), (HEADER_EVENT, kind.value.encode())]
    return headers, json.dumps(body, separators=(",", ":")).encode()


def _ints(body: dict[str, Any], name: str, n: int, *, nullable: bool = False) -> list[Any]:
    values = body.get(name)
    if (
        not isinstance(values, list)
        or len(values) != n
        or not all(type(v) is int or (nullable and v is None) for v in values)
    ):
        raise InternalRecordError(f"a set's {name} must be {n} integers")
    return values


def decode_set(origin: RecordOrigin, value: bytes | None) -> list[tuple[str, StreamEvent]]:
    """Each task's event in a set whose headers gave ``origin``; InternalRecordError
    if malformed."""
    kind = origin.event
    if kind not in SET_KINDS:
        raise InternalRecordError(f"{kind} is not a set of events")
    if value is None or len(value) > MAX_SET_BYTES:
        raise InternalRecordError(f"a set's value must be 1..{MAX_SET_BYTES} bytes")
    try:
        body = json.loads(value)
    except (UnicodeDecodeError, ValueError) as e:
        raise InternalRecordError(f"a set's value is not JSON: {e}") from e
    if not isinstance(body, dict) or body.get("v") != FORMAT_VERSION:
        raise InternalRecordError(f"a set must be an object with v={FORMAT_VERSION}")
    if body.get("attempt") != origin.attempt:
        raise InternalRecordError(
            f"the set's attempt {body.get('attempt')!r} disagrees with header {origin.attempt}"
        )
    tasks = body.get("tasks")
    if (
        not isinstance(tasks, list)
        or not 1 <= len(tasks) <= MAX_SET_TASKS
        or not all(type(t) is str for t in tasks)
        or len(set(tasks)) != len(tasks)
    ):
        raise InternalRecordError(f"a set needs 1..{MAX_SET_TASKS} distinct task ids")
    for t in tasks:
        check_id(t)
    if tasks[0] != origin.task:
        raise InternalRecordError(
            f"the set's first task {tasks[0]!r} disagrees with header {origin.task!r}"
        )
    stamps = _ints(body, "timestamps", len(tasks))
    if kind is EventKind.BARRIERS:
        n = body.get("checkpoint_id")
        if type(n) is not int or n < 0:
            raise InternalRecordError(f"a set's checkpoint_id must be an integer >= 0, got {n!r}")
        return [(t, Barrier(n, origin.attempt, ts)) for t, ts in zip(tasks, stamps, strict=True)]
    judged = (
        _ints(body, "judged", len(tasks), nullable=True)
        if "judged" in body
        else [None] * len(tasks)
    )
    return [(t, Watermark(ts, j)) for t, ts, j in zip(tasks, stamps, judged, strict=True)]
