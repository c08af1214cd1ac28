"""A worker's barriers on internal topics, one record per partition for many tasks.

Every upstream task forwards each checkpoint's barrier to every partition of its
internal topics (docs/design.md §5.3). Written per task, that is P_up x P_down records
per checkpoint and stage boundary: 1 048 576 at 1 024 partitions, five times the whole
input of the benchmark that found it, every interval (benchmarks/SCALING.md). A
worker's tasks write through one producer, so their barriers can share a record: the
barriers its tasks pass are collected per topic, and a record per partition carrying
all of them (:func:`kstream.kafka.internal.encode_barrier_set`) is written

- before anything else a task in the set writes to that topic — so each task's records
  before its barrier precede the record on every partition and those after it follow,
  as with a record of its own;
- when a task passes another checkpoint (or writes in another attempt) than the set's;
- when the worker asks (``write_all``): after triggering its tasks, and before each
  iteration's acknowledgements.

No barrier waits for another task: what was collected is written at the latest at the
end of the loop iteration, so a worker's source tasks — triggered together — share one
record per partition, and downstream tasks that align in the same iteration share one.
A reader takes the record as each listed task's barrier at its offset; so alignment,
positions and restores are per upstream task as before (``kstream.runtime.gate``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kstream.elements.events import Barrier
from kstream.kafka.internal import (
    MAX_BARRIER_SET_TASKS,
    encode_barrier_set,
    new_writer,
    seq_header,
)


@dataclass
class _Set:
    checkpoint_id: int
    attempt: int
    tasks: list[str] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    members: set[str] = field(default_factory=set)


class BarrierSets:
    """The barriers this worker's tasks passed and has not written yet, per topic.

    ``producer``: where records go (full queues waited out); ``partitions``: each
    internal topic's partition count; ``on_delivery``: the delivery callback of an
    attempt's records. The records' writer is this object's own (``ks.writer``,
    numbered per partition like a task's), so a reader drops a copy the idempotent
    producer wrote twice."""

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
        self._pending: dict[str, _Set] = {}
        self.records = 0  # barrier-set records written (for the metrics and tests)

    def holds(self, topic: str, task: str) -> bool:
        """Whether ``task``'s barrier on ``topic`` waits here: the task's next output
        to ``topic`` must follow it (call :meth:`write` first)."""
        s = self._pending.get(topic)
        return s is not None and task in s.members

    def add(self, topic: str, task: str, attempt: int, barrier: Barrier) -> None:
        """``task`` (in ``attempt``) passed ``barrier``: its barrier on ``topic`` joins
        the set, which is written first if it holds another checkpoint or attempt, or
        the task already."""
        s = self._pending.get(topic)
        if s is not None and (
            s.checkpoint_id != barrier.checkpoint_id
            or s.attempt != attempt
            or task in s.members
            or len(s.tasks) >= MAX_BARRIER_SET_TASKS
        ):
            self.write(topic)
            s = None
        if s is None:
            s = self._pending[topic] = _Set(barrier.checkpoint_id, attempt)
        s.tasks.append(task)
        s.timestamps.append(barrier.timestamp)
        s.members.add(task)

    def write(self, topic: str) -> None:
        """Write ``topic``'s set, if any: one record on each partition."""
        s = self._pending.pop(topic, None)
        if s is None:
            return
        headers, value = encode_barrier_set(
            s.tasks, s.timestamps, s.checkpoint_id, s.attempt, self.writer
        )
        n = self._partitions[topic]
        seqs = self._seqs.get(topic)
        if seqs is None:
            seqs = self._seqs[topic] = [0] * n
        callback = self._on_delivery(s.attempt)
        produce = self._producer.produce
        for p in range(n):
            produce(
                topic,
                value=value,
                key=None,
                partition=p,
                headers=[*headers, seq_header(seqs[p])],
                on_delivery=callback,
            )
            seqs[p] += 1
        self.records += n
        self._producer.poll(0)

    def write_all(self) -> None:
        """Write every set collected."""
        for topic in list(self._pending):
            self.write(topic)
