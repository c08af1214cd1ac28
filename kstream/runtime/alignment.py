"""Checkpoint barrier alignment of a task (part of :class:`kstream.runtime.task.Task`, a
base class of it).

Checkpoint barrier handling, in order (docs/design.md §4, §5.4):

1. An input that delivers barrier *n* is held back: ``paused_inputs()`` lists the
   partitions to pause; anything still fed for it is buffered, per upstream task
   inside a shared internal partition.
2. When every live input delivered *n*, each barrier timestamp is applied to its
   input's watermark and the task watermark (minimum over inputs) advances: windows
   ending at or before it fire and timers due by it run, and operators emit what is
   due per checkpoint (``before_snapshot``), all *before* the snapshot, so their
   results belong to epoch *n* (a firing in slices may go on after it, see below).
3. ``SnapshotPoint`` is output: the state is exactly the checkpoint's (no
   post-barrier record processed yet); positions say where each input resumes (per
   upstream task for internal partitions).
4. The barrier is forwarded to every output (internal topics and sinks).
5. Everything the task would do next (replaying the inputs' buffers, the rest of
   the batch) waits, in order, until its runner took the snapshot and calls
   :meth:`Task.snapshot_taken`; a call in between is refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kstream.elements.events import MIN_TS, Barrier, StreamEvent
from kstream.elements.records import AlignmentAborted, Output, SnapshotPoint
from kstream.runtime.gate import InputGate

if TYPE_CHECKING:
    from kstream.operators.firing import TaskFiring
    from kstream.runtime.channels import Channel
    from kstream.runtime.graph import Graph


class BarrierAlignment:
    """Barriers in, the snapshot point, barriers out (see the module)."""

    task_id: str
    attempt: int
    watermark: int
    metrics: dict[str, int]
    _gate: InputGate
    _graph: Graph
    _firing: TaskFiring
    _out: list[Output]
    _emitted_wm: int

    def _replay(self, c: Channel) -> None:
        raise NotImplementedError

    def _update_watermark(self, *, emit: bool = True) -> None:
        raise NotImplementedError

    def _broadcast(self, event: StreamEvent) -> None:
        raise NotImplementedError

    def _on_barrier(self, c: Channel, b: Barrier, position: int | None) -> None:
        pending = self._gate.pending
        if pending is not None and b.checkpoint_id < pending:
            self.metrics["stale_barriers"] += 1  # an aborted checkpoint's straggler
            return
        if pending is not None and b.checkpoint_id > pending:
            self._abort_alignment(
                f"barrier {b.checkpoint_id} arrived on {c.describe()} before barrier "
                f"{pending} aligned"
            )
        self._gate.block(c, b, position)
        self._check_aligned()

    def _abort_alignment(self, reason: str) -> None:
        assert self._gate.pending is not None
        self._out.append(AlignmentAborted(self._gate.pending, reason))
        for c in self._gate.abort():
            self._replay(c)

    def _check_aligned(self) -> None:
        gate = self._gate
        n = gate.pending
        live = gate.aligned()
        if n is None or live is None:
            return
        # (1) Barrier timestamps are watermarks: fire what they allow before the snapshot.
        for c in live:
            if c.barrier_timestamp > c.watermark:
                c.watermark = c.barrier_timestamp
        self._update_watermark(emit=False)
        for op in self._graph.stateful:  # results due per checkpoint belong to epoch n
            op.before_snapshot()
        # (2) Snapshot point: state now is exactly checkpoint n's.
        self._snapshot(n, final=False)
        self._firing.note_checkpoint(n)  # mid-firing: its progress is in the snapshot
        # (3) Forward the barrier downstream, carrying the task watermark.
        self._emitted_wm = max(self._emitted_wm, self.watermark)
        self._broadcast(Barrier(n, self.attempt, self.watermark))
        # (4) Release the inputs and replay what arrived after their barrier: all of it
        # waits, in order, until the snapshot is taken (snapshot_taken).
        gate.release(live)
        for c in live:
            self._replay(c)
        self._update_watermark()

    def _snapshot(self, checkpoint_id: int | None, *, final: bool) -> None:
        # Input watermarks belong to the state: a restored task judges the records it
        # reads again against the watermarks the failure-free run had there. They travel
        # with the snapshot point (the manifest), not through the state backend: a
        # stateless task's snapshot then writes nothing to RocksDB.
        marks = {
            (key[0], key[1], key[2] or ""): c.watermark
            for key, c in self._gate.channels.items()
            if c.watermark > MIN_TS
        }
        positions = self._gate.positions(final=final)
        self._out.append(
            SnapshotPoint(self.task_id, checkpoint_id, self.attempt, positions, final, marks)
        )
        self._gate.holding = True  # until snapshot_taken()
