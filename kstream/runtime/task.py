"""``Task``: one stage x one partition, I/O free. The worker feeds it batches and
events with the processing time ``now`` (seconds, monotonic) and drains its
ordered outputs after every call (see ``kstream.elements.records``).

Checkpoint barriers are aligned as :mod:`kstream.runtime.alignment` describes (a base
class of ``Task``).

The channels, what they hold back and where they resume are the input gate's
(:mod:`kstream.runtime.gate`); the operators are built by :mod:`kstream.runtime.graph`.

Watermarks: a source partition's watermark is ``max timestamp - out_of_orderness``;
an internal input's comes from ``Watermark``/``Barrier`` events of its upstream
task; idle inputs are skipped (a source partition after its strategy's
``idle_timeout_s`` without records; an internal input after the largest source
idle timeout of the topology without records or events); table inputs never hold
time back; the task watermark never goes back. Watermarks are per record: a source
partition's advances record by record within a batch (a running maximum), an
internal input's at each ``Watermark`` event among its records, and each record's
lateness is decided against the task watermark just before it (see
:mod:`kstream.runtime.recordwatermarks`) — or, for a run of one upstream task's
records, against that task's watermark there, or the one it judged them against
itself (``Watermark.judged``), when it is ahead; what this task writes under such a
watermark is marked with it in turn (see :mod:`kstream.runtime.lateness`). Downstream gets a ``Watermark`` event after every
call that wrote internal records, before any records processed after the watermark
moved, every ``watermark_interval_s`` otherwise, and on every forwarded barrier.

Firing in slices (:mod:`kstream.operators.firing`): with a ``firing_budget`` windows
fire a slice per call, :meth:`Task.tick` goes on; no record is processed meanwhile
(it waits in its channel's buffer), but a barrier at the head of a channel goes in
(a source's before the waiting records): a checkpoint mid-firing holds its progress.

Bounded mode: when every input ended, all windows fire, ``EndOfInput`` goes to
every output and the final state is handed over once (``SnapshotPoint(final=True)``,
no barrier). The stored operator watermarks stay the last real ones, so a later
run continues from that state.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from kstream.config import OnError
from kstream.elements.errors import OperatorErrors
from kstream.elements.events import (
    MAX_TS,
    MIN_TS,
    Barrier,
    EndOfInput,
    PipelinedEventError,
    StreamEvent,
    Watermark,
)
from kstream.elements.records import (
    DeadLetter,
    InternalEvent,
    InternalRecord,
    Output,
    OutputBatch,
    OutputEvent,
    Position,
    SourceRecord,
)
from kstream.operators.core import Operator
from kstream.operators.firing import Budget, TaskFiring
from kstream.plan.model import InputKind, JobPlan, OutputKind, TaskSpec
from kstream.runtime.alignment import BarrierAlignment
from kstream.runtime.channels import Channel
from kstream.runtime.counters import task_counters
from kstream.runtime.gate import InputGate, QueuedBarrier, unseen
from kstream.runtime.graph import build_graph
from kstream.runtime.intake import InternalIntake
from kstream.runtime.lateness import JudgedRuns, late_counts
from kstream.runtime.recordwatermarks import watermark_cuts
from kstream.state.base import KeyedStateBackend, TableSpec

log = logging.getLogger(__name__)

_SOURCE_FIELDS = (0, 1, 2, 3)  # where a SourceRecord holds its key, value, time, offset


class Task(BarrierAlignment, InternalIntake):
    """Runs one ``TaskSpec`` of a ``JobPlan`` over a keyed-state backend.

    ``attempt`` is the job attempt this task runs in (records of older attempts on
    internal inputs are dropped). ``restore_positions`` (from a ``SnapshotPoint``)
    makes the task skip internal records that its restored state already holds.
    After a ``SnapshotPoint`` output the task holds still until :meth:`snapshot_taken`:
    its state stays exactly the snapshot's while its runner takes it. ``bounded=True`` runs a batch job: inputs end with ``EndOfInput``/
    ``end_input``, barriers are an error.
    """

    def __init__(
        self,
        plan: JobPlan,
        task: str | TaskSpec,
        backend: KeyedStateBackend,
        *,
        attempt: int = 0,
        bounded: bool = False,
        restore_positions: Mapping[tuple[str, int], Position] | None = None,
        restore_watermarks: Mapping[tuple[str, int, str], int] | None = None,
        watermark_interval_s: float = 0.2,
        now: float = 0.0,
        firing_budget: Budget | None = None,
    ) -> None:
        self.spec = plan.task(task) if isinstance(task, str) else task
        self.task_id = self.spec.task_id
        self.plan = plan
        self.backend = backend
        self.attempt = attempt
        self.bounded = bounded
        self.watermark_interval_s = watermark_interval_s
        self.watermark = MIN_TS  # what every operator has fired up to
        self.finished = False
        self.metrics = task_counters()  # (runtime.counters)
        self._out: list[Output] = []
        self._now = now
        self._last_wm_emit = now
        self._emitted_wm = MIN_TS
        self._graph = build_graph(plan, self.spec, backend, self.metrics, self._out)
        internal_out = [o.topic for o in self.spec.outputs if o.kind is OutputKind.INTERNAL]
        self._judged = JudgedRuns(internal_out)  # (runtime.lateness)
        self._errors = OperatorErrors(self._out)  # on_error="dead_letter" (runtime.errors)
        if plan.topology.on_error is OnError.DEAD_LETTER:
            for op in self._graph.ops:
                op.errors = self._errors  # operators without user functions never use it
        # What waits for the snapshot at the last SnapshotPoint, in order: the rest of
        # a channel's items ("items") or a watermark update ("wm").
        self._held: list[tuple[str, Channel | None, list[Any]]] = []
        # Input watermarks are part of the snapshot (SnapshotPoint.watermarks); snapshots
        # taken before they were kept there (restore_watermarks None) have them in a table.
        marks = (
            dict(backend.table(TableSpec("task.watermarks")).scan(()))
            if restore_watermarks is None
            else restore_watermarks
        )
        self._gate = InputGate(plan, self.spec, now, restore_positions or {}, marks)
        # A time channel that held the task watermark back at the last look (see
        # ``_update_watermark``).
        self._blocker: Channel | None = None
        # A firing in slices: its target watermark (stored once a slice stops short, so
        # a snapshot between slices has it; a restored task goes on with it first).
        self._firing = TaskFiring(self.task_id, backend, None if bounded else firing_budget)

    # ---- what the runner calls ----------------------------------------------------

    def late_counts(self) -> dict[str, tuple[int, int]]:
        """Per operator that saw late records: (dropped, sent to the side output)."""
        return late_counts(self._graph.ops)

    def drain(self) -> list[Output]:
        """The outputs produced since the last drain, in order."""
        self.metrics["operator_errors"] = self._errors.count
        out = self._judged.drained(self._out[:], self._emitted_wm)  # (runtime.lateness)
        self._out.clear()
        return out

    @property
    def firing(self) -> bool:
        """Whether a firing is in progress (:meth:`tick` goes on with it)."""
        return self._firing.active

    def paused_inputs(self) -> frozenset[tuple[str, int]]:
        """Partitions to pause: every channel of them is held back by alignment; during
        a firing also the sources and the partitions with records waiting for it."""
        return self._gate.paused_inputs(firing=self._firing.active)

    def source_watermarks(self) -> dict[tuple[str, int], tuple[int, bool]]:
        """``(watermark, ended)`` of each user-topic source partition (not tables):
        what watermark alignment compares."""
        return {c.tp: (c.watermark, c.ended) for c in self._gate.source_channels if c.holds_time}

    def seek_positions(self) -> dict[tuple[str, int], int | None]:
        """Where the worker should start reading each input partition (``None``:
        the job's start position). Internal partitions start at the lowest restored
        upstream position; the task skips what each upstream had before its own."""
        return self._gate.seek_positions()

    def feed_source(
        self, topic: str, partition: int, records: Sequence[SourceRecord], now: float
    ) -> None:
        """Process a batch of raw records from a user topic partition."""
        self._enter(now)
        c = self._gate.channel(topic, partition, None)
        if c.blocked_on is not None or c.buffer or self._firing.active:
            c.buffer.append(records)
            c.last_active = now  # waiting for a firing is not idleness
            return
        self._source_batch(c, records)
        self._update_watermark()

    def feed_internal(
        self,
        topic: str,
        partition: int,
        items: Sequence[InternalRecord | InternalEvent],
        now: float,
    ) -> None:
        """Process records and events from an internal-topic partition, in offset order."""
        self._enter(now)
        self._internal_items(topic, partition, items)
        self._update_watermark()

    def end_input(self, topic: str, partition: int, now: float) -> None:
        """A user topic partition is exhausted (bounded run reached its end offset)."""
        self._enter(now)
        c = self._gate.channel(topic, partition, None)
        if c.blocked_on is not None or c.buffer or self._firing.active:
            c.buffer.append(EndOfInput())
            return
        c.ended = True
        self._after_end()

    def trigger_checkpoint(self, checkpoint_id: int, attempt: int, now: float) -> None:
        """Inject ``Barrier(checkpoint_id, attempt, current watermark)`` on the
        task's user-topic inputs, recording their positions. No-op for tasks that
        only read internal topics (their barriers arrive from upstream)."""
        self._enter(now)
        gate = self._gate
        if not gate.source_channels:
            return
        if self.bounded:
            c = gate.source_channels[0]
            raise PipelinedEventError(
                Barrier(checkpoint_id, attempt, self.watermark), c.topic, c.partition, self.task_id
            )
        if attempt < self.attempt:
            self.metrics["stale_barriers"] += 1
            return
        barrier = Barrier(checkpoint_id, self.attempt, self.watermark)
        live = [c for c in gate.source_channels if not c.ended]
        if not live:
            if not gate.has_internal:
                gate.pending = checkpoint_id
                self._check_aligned()
            return
        for c in live:
            if c.blocked_on is None and (
                not c.buffer or (self._firing.active and gate.only_records(c))
            ):
                # (Records waiting for a firing are not processed yet: the barrier goes
                # before them, as if they had not been fed; they follow it.)
                self._on_barrier(c, barrier, c.position)
            else:  # still held by an earlier barrier: inject after what is buffered
                c.buffer.append(QueuedBarrier(barrier, gate.buffered_end(c)))

    def snapshot_taken(self) -> None:
        """The snapshot at the last ``SnapshotPoint`` is taken: do, in order, what waited
        for it (which may stop at the next snapshot point)."""
        gate = self._gate
        if not gate.holding:
            return
        gate.holding = False
        queue, self._held = self._held, []
        for i, (kind, c, items) in enumerate(queue):
            if gate.holding:
                self._held.extend(queue[i:])  # after what the new point deferred
                return
            if kind == "wm" or c is None:
                self._update_watermark()
            elif c.upstream is None:
                self._source_items(c, items)
            else:
                self._internal_items(c.topic, c.partition, items)

    def tick(self, now: float, wall_ms: int | None = None) -> None:
        """Let processing time pass: a slice of the firing in progress, idleness and
        periodic watermark emission; with ``wall_ms`` (the wall clock, epoch ms) also
        processing-time timers and triggers (not during a firing)."""
        self._enter(now)
        if self._firing.active:
            self._go_on()
            if self._firing.active or self._gate.holding:
                return
        if wall_ms is not None:
            for op in self._graph.stateful:
                op.on_processing_time(wall_ms)
        self._update_watermark()

    # ---- internals ----------------------------------------------------------------

    def _enter(self, now: float) -> None:
        if self._gate.holding:
            raise RuntimeError(
                f"task {self.task_id} holds at a snapshot point: take the snapshot and call "
                "snapshot_taken() first"
            )
        self._now = now

    def _source_batch(self, c: Channel, records: Sequence[SourceRecord]) -> None:
        if c.ended:
            return  # bounded: past the end offsets; the next run reads them from the position
        records = unseen(records, c.position, self.metrics)
        if not records:
            return
        keys, values, stamps = self._decode(c.topic, c.partition, records, _SOURCE_FIELDS)
        c.position = records[-1][3] + 1
        c.last_active = self._now
        entry = self._graph.readers[c.topic].entry
        if stamps and c.kind is InputKind.SOURCE:
            self._emit_timed(c, entry, keys, values, stamps)
        else:
            self._before_writing()
            entry.emit(keys, values, stamps)

    def _emit_timed(
        self, c: Channel, entry: Operator, keys: list[Any], values: list[Any], stamps: list[int]
    ) -> None:
        """A source batch with per-record watermarks: cut where a record is behind the
        task watermark (:mod:`kstream.runtime.recordwatermarks`), the task advancing there
        (all of it now, not in slices) before it goes on."""
        gate, now = self._gate, self._now
        c.watermark, cuts = watermark_cuts(
            stamps,
            gate.out_of_orderness.get(c.topic, 0),
            c.watermark,
            lambda: gate.others_watermark(c, now),
            self.watermark,
        )
        self._before_writing()
        lo = 0
        for i, before in cuts:
            entry.emit(keys[lo:i], values[lo:i], stamps[lo:i])
            lo = i
            self._advance(before, sliced=False)
            self._emit_watermark()
        entry.emit(keys[lo:], values[lo:], stamps[lo:])

    def _decode(
        self, topic: str, partition: int, rows: Sequence[Sequence[Any]], fields: tuple[int, ...]
    ) -> tuple[list[Any], list[Any], list[int]]:
        """Decode a run of raw records (``fields``: where each holds its key, value,
        timestamp and offset); what fails goes to the dead-letter topic with the reason."""
        ki, vi, ti, oi = fields
        keys, values, stamps, failures = self._graph.readers[topic].decode(rows, (ki, vi, ti))
        for i, reason in failures:
            r = rows[i]
            self._out.append(DeadLetter(topic, partition, r[oi], reason, r[ki], r[vi], r[ti]))
        self.metrics["dead_letters"] += len(failures)
        self.metrics["records_in"] += len(rows)
        self._errors.topic, self._errors.partition = topic, partition
        return keys, values, stamps

    def _on_event(self, c: Channel, event: StreamEvent, offset: int | None) -> None:
        if isinstance(event, Watermark):
            c.judged = MIN_TS if event.judged is None else event.judged
            if event.timestamp > c.watermark:
                c.watermark = event.timestamp
                # The records after it are judged against it (per-record watermarks).
                self._update_watermark(emit=False)
        elif isinstance(event, EndOfInput):
            c.ended = True
            self._after_end()
        elif isinstance(event, Barrier):
            c.judged = MIN_TS  # (the writer's floor is not in a snapshot: told again)
            if self.bounded:
                raise PipelinedEventError(event, c.topic, c.partition, self.task_id)
            self._on_barrier(c, event, None if offset is None else offset + 1)

    def _replay(self, c: Channel) -> None:
        pending, c.buffer = c.buffer, []
        if not pending:
            return
        if c.upstream is not None:
            self._internal_items(c.topic, c.partition, pending)
        else:
            self._source_items(c, pending)

    def _source_items(self, c: Channel, items: list[Any]) -> None:
        """A source channel's buffered batches, queued barriers and end of input."""
        for i, item in enumerate(items):
            if self._gate.holding:  # a snapshot point came up: the rest waits for it
                self._held.append(("items", c, items[i:]))
                return
            if c.blocked_on is not None or (
                self._firing.active and (c.buffer or not isinstance(item, QueuedBarrier))
            ):  # held by alignment, or waiting for a firing (a barrier at the head goes in)
                c.buffer.extend(items[i:])
                return
            if isinstance(item, EndOfInput):
                c.ended = True
                self._after_end()
            elif isinstance(item, QueuedBarrier):
                self._on_barrier(c, item.barrier, item.position)
            else:  # as feed_source does: each batch's watermark before the next batch
                self._source_batch(c, item)
                self._update_watermark()

    def _broadcast(self, event: StreamEvent) -> None:
        for o in self.spec.outputs:
            internal = o.kind is OutputKind.INTERNAL
            if internal or not isinstance(event, Watermark):
                self._out.append(OutputEvent(o.topic, internal, event))

    def _update_watermark(self, *, emit: bool = True) -> None:
        if self._gate.holding:  # the state stays the snapshot's until it is taken
            self._held.append(("wm", None, []))
            return
        now = self._now
        # The task watermark is the least watermark of the live, not idle time channels.
        # While the channel that held it back at the last look still does, nothing can
        # move it: no look over every channel (at 1024 partitions, a look over 1 024
        # channels for each of a set's 1 024 watermark events took 40 % of a worker).
        b = self._blocker
        if b is None or b.ended or b.watermark > self.watermark or b.idle(now):
            self._advance(self._least_watermark(now))
        # Downstream keeps up with the data: a watermark follows every call that wrote
        # internal records, and the timer covers progress without data (idleness).
        if (
            emit
            and self.watermark > self._emitted_wm
            and (
                now - self._last_wm_emit >= self.watermark_interval_s
                or any(type(o) is OutputBatch and o.internal for o in self._out)
            )
        ):
            self._emit_watermark()

    def _least_watermark(self, now: float) -> int:
        """The least watermark of the live, not idle time channels (the task's when there
        is none); remembers one at or below the task watermark, which holds it back."""
        least: int | None = None
        blocker = None
        mark = self.watermark
        for c in self._gate.time_channels:
            if c.ended or c.idle(now):
                continue
            w = c.watermark
            if least is None or w < least:
                least = w
            if blocker is None and w <= mark:
                blocker = c
        self._blocker = blocker
        return mark if least is None else least

    def _advance(self, new: int, *, sliced: bool = True) -> None:
        """The task watermark moves up to ``new`` (never back): operators fire — in
        slices with a firing budget (``sliced``); the watermark moves when all fired.
        During a firing nothing else moves it: it is recomputed after the firing."""
        firing = self._firing
        if firing.active or new <= self.watermark:
            return
        if firing.start(new, self._graph.stateful, sliced=sliced):
            self.watermark = new

    def _go_on(self) -> None:
        """One slice of the firing in progress; when it is done, what waited for it —
        each channel's buffer in order — and then the next watermark step."""
        target = self._firing.target
        assert target is not None
        if not self._firing.go_on(self._graph.stateful):
            return
        self.watermark = target
        for c in self._gate.channels.values():
            if c.buffer and c.blocked_on is None:
                self._replay(c)  # (waits again if it starts a firing or a snapshot point)
        self._update_watermark()

    def _before_writing(self) -> None:
        """Records are about to be processed: downstream gets the watermark they are
        judged against before any record they lead to (a record behind it is late there
        too, however the writes are batched)."""
        if self.watermark > self._emitted_wm:
            self._emit_watermark()

    def _emit_watermark(self) -> None:
        if self.watermark > self._emitted_wm:
            self._emitted_wm = self.watermark
            self._last_wm_emit = self._now
            self._broadcast(Watermark(self.watermark))

    def _after_end(self) -> None:
        if self.finished:
            return
        if self._gate.all_ended():
            self._finish()
        else:
            self._update_watermark()
            self._check_aligned()  # an ended input no longer holds alignment back

    def _finish(self) -> None:
        """All inputs ended: fire everything, tell downstream, hand over final state."""
        self.finished = True
        if self._firing.target is not None:  # (only with a budget: not in bounded runs)
            self.watermark = self._firing.target
            self._firing.go_on(self._graph.stateful, sliced=False)
        for op in self._graph.stateful:
            op.finish()
        self._emitted_wm = MAX_TS
        self._broadcast(EndOfInput())
        if self.bounded:
            self._snapshot(None, final=True)
