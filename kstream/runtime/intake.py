"""A task's intake of internal-topic items: records and events of one partition, in
offset order, through the input gate (restored or repeated ones skipped, stale
attempts dropped, held back by alignment or a firing), records pushed in runs of one
upstream task's.

Each run is judged late against that upstream task's watermark there — the larger of
its channel's watermark and what it judged the records against itself
(``Channel.judged``, from ``Watermark.judged``) — when that is ahead of the task's own
(:class:`kstream.runtime.lateness.JudgedRuns`). Part of :class:`kstream.runtime.task.Task`
(a base class of it); the events are the task's (``_on_event``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kstream.elements.events import Barrier, StreamEvent
from kstream.elements.records import InternalEvent, InternalRecord, Output
from kstream.runtime.gate import InputGate, second_copy
from kstream.runtime.lateness import JudgedRuns

if TYPE_CHECKING:
    from kstream.operators.firing import TaskFiring
    from kstream.runtime.channels import Channel
    from kstream.runtime.graph import Graph

# Where a raw record holds its key, value, timestamp and offset.
INTERNAL_FIELDS = tuple(
    InternalRecord._fields.index(f) for f in ("key", "value", "timestamp", "offset")
)


class InternalIntake:
    """The internal-topic half of a task's input (see the module)."""

    attempt: int
    watermark: int
    metrics: dict[str, int]
    _gate: InputGate
    _graph: Graph
    _firing: TaskFiring
    _held: list[tuple[str, Channel | None, list[Any]]]
    _now: float
    _out: list[Output]
    _judged: JudgedRuns

    def _decode(
        self, topic: str, partition: int, rows: Sequence[Sequence[Any]], fields: tuple[int, ...]
    ) -> tuple[list[Any], list[Any], list[int]]:
        raise NotImplementedError

    def _on_event(self, c: Channel, event: StreamEvent, offset: int | None) -> None:
        raise NotImplementedError

    def _before_writing(self) -> None:
        raise NotImplementedError

    def _internal_items(
        self, topic: str, partition: int, items: Sequence[InternalRecord | InternalEvent]
    ) -> None:
        gate = self._gate
        channels = gate.channels
        run: list[InternalRecord] = []
        run_c: Channel | None = None  # whose records the run holds (one writer's)
        attempt = self.attempt
        for i, it in enumerate(items):
            c = channels.get((topic, partition, it.upstream)) or gate.channel(
                topic, partition, it.upstream
            )
            if gate.holding:  # a snapshot point came up: the rest waits for it, in order
                self._held.append(("items", c, list(items[i:])))
                break
            if c.position is not None and it.offset < c.position:
                # Already in the state: below the restored position, or delivered again
                # by a consumer that rewound (see gate.unseen).
                self.metrics["restored_skipped"] += 1
                continue
            if it.attempt < attempt:
                self.metrics["stale_dropped"] += 1  # a failed attempt's output
                continue
            if c.blocked_on is not None:
                c.buffer.append(it)
                continue
            if self._firing.active and (
                c.buffer or not isinstance(it, InternalEvent) or not isinstance(it.event, Barrier)
            ):  # waits for the firing; a barrier at the head of its channel goes in
                c.buffer.append(it)
                c.last_active = self._now
                continue
            c.position = it.offset + 1
            c.last_active = self._now
            if it.seq is not None and second_copy(c, it.writer, it.seq):
                self.metrics["duplicates_dropped"] += 1
                continue
            if type(it) is InternalRecord:
                if c is not run_c:
                    self._internal_run(topic, partition, run, run_c)
                    run, run_c = [], c
                run.append(it)
                continue
            self._internal_run(topic, partition, run, run_c)
            run = []
            assert isinstance(it, InternalEvent)
            self._on_event(c, it.event, it.offset)
        self._internal_run(topic, partition, run, run_c)

    def _internal_run(
        self, topic: str, partition: int, run: list[InternalRecord], c: Channel | None
    ) -> None:
        """One writer's records: judged late against its watermark there when it is
        ahead of the task's (the other writers' lag must not make a record the writer
        had made late count again: a catch-up would count what a live run drops)."""
        if not run or c is None:
            return
        keys, values, stamps = self._decode(topic, partition, run, INTERNAL_FIELDS)
        self._before_writing()
        entry = self._graph.readers[topic].entry
        floor = c.judged if c.judged > c.watermark else c.watermark
        if floor <= self.watermark:
            entry.emit(keys, values, stamps)
        else:
            self._judged.push(self._out, entry, self._graph.stateful, floor, keys, values, stamps)
