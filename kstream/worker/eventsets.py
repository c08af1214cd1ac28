"""A worker's barriers and watermarks on internal topics, one record per partition for
many tasks (the record: :mod:`kstream.kafka.eventsets`).

Every upstream task sends each barrier and each watermark step to every partition of
its internal topics (docs/design.md §3, §5.3): P_up x P_down records a checkpoint and
as many a watermark step — at 1 024 partitions a checkpoint alone wrote 1 048 576
(benchmarks/SCALING.md). A worker's tasks write through one producer, so what they pass
is collected here per topic and written as one record per partition for all of them:

- **Watermarks.** A task's watermark is due downstream before its next records: before
  a task writes records, its pending watermark goes, as a record of its own, only to
  the partitions those records go to (and each once). Every other partition gets it in
  the set.
- **Barriers.** A task's barrier is written in the set before anything else the task
  writes to the topic, so its records before the barrier precede the set on every
  partition and those after it follow, as with a record of its own.
- **When.** A topic's sets (its watermarks first, then its barriers) are written before
  a task in them writes anything the set must precede; when a task passes another
  checkpoint or writes in another attempt than the set's; and when the worker asks
  (``write_all``: after triggering its tasks and at the end of each loop iteration,
  before acknowledgements). Nothing waits for another task.

A reader takes a set as each listed task's own event at the set's offset. Per upstream
task and partition, a reader thus sees what it saw with a record per task, except that
a watermark superseded before any record followed it on that partition may be skipped
(the later one says more). Alignment, positions and restores stay per upstream task
(``kstream.runtime.gate``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kstream.elements.events import Barrier, Watermark
from kstream.kafka.eventsets import MAX_SET_TASKS, encode_set
from kstream.kafka.internal import new_writer, produce_on


@dataclass
class _Pending:
    """A topic's events collected: watermarks by task (with the partitions a watermark
    already went to on its own), then one checkpoint's barriers."""

    attempt: int
    watermarks: dict[str, tuple[Watermark, set[int]]] = field(default_factory=dict)
    checkpoint_id: int | None = None
    barriers: dict[str, Barrier] = field(default_factory=dict)


class EventSets:
    """The barriers and watermarks this worker's tasks passed and that are not written
    yet, per internal topic.

    ``producer``: where records go (full queues waited out); ``partitions``: each
    internal topic's partition count; ``on_delivery``: the delivery callback of an
    attempt's records. The sets' writer is this object's own (``ks.writer``, numbered
    per partition like a task's), so a reader drops a copy the idempotent producer
    wrote twice."""

    def __init__(
        self,
        producer: Any,
        partitions: dict[str, int],
        on_delivery: Callable[[int], Callable[[Any, Any], None]],
    ) -> None:
        self._producer = producer
        self._partitions = partitions
        self._on_delivery = on_delivery
        self.writer = new_writer()
        self._seqs: dict[str, list[int]] = {}
        self._pending: dict[str, _Pending] = {}
        self.records = 0  # set records written

    def _open(self, topic: str, attempt: int) -> _Pending:
        p = self._pending.get(topic)
        if p is None:
            p = self._pending[topic] = _Pending(attempt)
        return p

    def barrier(self, topic: str, task: str, attempt: int, barrier: Barrier) -> None:
        """``task`` (in ``attempt``) passed ``barrier``."""
        p = self._pending.get(topic)
        if p is not None and (
            p.attempt != attempt
            or p.checkpoint_id not in (None, barrier.checkpoint_id)
            or task in p.barriers
            or len(p.barriers) >= MAX_SET_TASKS
        ):
            self.write(topic)
        p = self._open(topic, attempt)
        p.checkpoint_id = barrier.checkpoint_id
        p.barriers[task] = barrier

    def watermark(self, topic: str, task: str, attempt: int, watermark: Watermark) -> None:
        """``task`` (in ``attempt``) moved its watermark: it supersedes the task's
        pending one."""
        p = self._pending.get(topic)
        if p is not None and (
            p.attempt != attempt
            or task in p.barriers  # (the barrier goes first)
            or (task not in p.watermarks and len(p.watermarks) >= MAX_SET_TASKS)
        ):
            self.write(topic)
        self._open(topic, attempt).watermarks[task] = (watermark, set())

    def before_records(
        self, topic: str, task: str, attempt: int, partitions: Iterable[int]
    ) -> tuple[Watermark | None, list[int]]:
        """``task`` (in ``attempt``) is about to write records to ``partitions`` of
        ``topic``: its barrier is written (with the sets) if it waits here; else its
        pending watermark and the partitions it must now go to on its own (in order).
        Sets of another attempt are written first, under their own attempt: a task
        restored since never sends a watermark of the attempt before as its own."""
        p = self._pending.get(topic)
        if p is None:
            return None, []
        if task in p.barriers or p.attempt != attempt:
            self.write(topic)
            return None, []
        entry = p.watermarks.get(task)
        if entry is None:
            return None, []
        wm, sent = entry
        new = sorted(set(partitions) - sent)
        sent.update(new)
        return wm, new

    def before_event(self, topic: str, task: str, attempt: int) -> None:
        """``task`` (in ``attempt``) is about to write an event of its own to every
        partition of ``topic``: what waits here of it (or of another attempt) goes
        first."""
        p = self._pending.get(topic)
        if p is not None and (task in p.barriers or task in p.watermarks or p.attempt != attempt):
            self.write(topic)

    def write(self, topic: str) -> None:
        """Write ``topic``'s sets, if any: its watermarks (those not yet on every
        partition), then its barriers, a record on each partition."""
        p = self._pending.pop(topic, None)
        if p is None:
            return
        n = self._partitions[topic]
        marks = {t: wm for t, (wm, sent) in p.watermarks.items() if len(sent) < n}
        if marks:
            self._write_set(topic, n, list(marks), list(marks.values()), p.attempt)
        if p.barriers:
            self._write_set(topic, n, list(p.barriers), list(p.barriers.values()), p.attempt)

    def write_all(self) -> None:
        """Write every set collected."""
        for topic in list(self._pending):
            self.write(topic)

    def _write_set(
        self,
        topic: str,
        n: int,
        tasks: list[str],
        events: list[Barrier] | list[Watermark],
        attempt: int,
    ) -> None:
        headers, value = encode_set(tasks, events, attempt, self.writer)
        seqs = self._seqs.get(topic)
        if seqs is None:
            seqs = self._seqs[topic] = [0] * n
        produce_on(
            self._producer, topic, range(n), headers, value, self._on_delivery(attempt), seqs
        )
        self.records += n
        self._producer.poll(0)
