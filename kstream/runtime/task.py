"""``Task``: one stage x one partition, I/O free. The worker feeds it batches and
events with the processing time ``now`` (seconds, monotonic) and drains its
ordered outputs after every call (see ``kstream.runtime.records``).

Checkpoint barrier handling, in order (DESIGN §4, §5.4):

1. An input that delivers barrier *n* is held back: ``paused_inputs()`` lists the
   partitions to pause; anything still fed for it is buffered, per upstream task
   inside a shared internal partition.
2. When every live input delivered *n*, each barrier timestamp is applied to its
   input's watermark and the task watermark (minimum over inputs) advances: windows
   ending at or before it fire and timers due by it run, and operators emit what is
   due per checkpoint (``before_snapshot``), all *before* the snapshot, so their
   results belong to epoch *n*.
3. ``SnapshotPoint`` is emitted and ``on_snapshot`` called while the state is
   exactly the checkpoint's (no post-barrier record processed yet); positions say
   where each input resumes (per upstream task for internal partitions).
4. The barrier is forwarded to every output (internal topics and sinks).
5. Inputs are released and their buffers replayed.

Watermarks: a source partition's watermark is ``max timestamp - out_of_orderness``;
an internal input's comes from ``Watermark``/``Barrier`` events of its upstream
task; idle inputs are skipped (a source partition after its strategy's
``idle_timeout_s`` without records; an internal input after the largest source
idle timeout of the topology without records or events); table inputs never hold
time back; the task watermark never goes back. Watermarks are per record: a source
partition's advances record by record within a batch (a running maximum), an
internal input's at each ``Watermark`` event among its records, and each record's
lateness is decided against the task watermark just before it (see
``_emit_timed``). Downstream gets a ``Watermark`` event after every call that wrote
internal records (and before a record that was behind the watermark), every
``watermark_interval_s`` otherwise, and on every forwarded barrier.

Bounded mode: when every input ended, all windows fire, ``EndOfInput`` goes to
every output and the final state is handed over once (``SnapshotPoint(final=True)``,
no barrier). The stored operator watermarks stay the last real ones, so a later
run continues from that state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from itertools import accumulate, islice
from operator import lt
from typing import Any, NamedTuple

from kstream.api.time import WatermarkStrategy
from kstream.api.topology import Node
from kstream.api.windows import Hopping, Session, Sliding, Tumbling
from kstream.plan.model import InputKind, JobPlan, OutputKind, TaskSpec
from kstream.plan.operators import operator_ids
from kstream.runtime.channels import Channel
from kstream.runtime.events import (
    MAX_TS,
    MIN_TS,
    Barrier,
    EndOfInput,
    PipelinedEventError,
    StreamEvent,
    Watermark,
)
from kstream.runtime.joins import IntervalJoinOperator, TableJoinOperator
from kstream.runtime.operators import (
    FilterOp,
    FlatMapOp,
    KeyByOp,
    MapOp,
    Operator,
    Passthrough,
    SinkOp,
)
from kstream.runtime.process import ProcessOperator
from kstream.runtime.records import (
    AlignmentAborted,
    DeadLetter,
    InternalEvent,
    InternalRecord,
    Output,
    OutputBatch,
    OutputEvent,
    Position,
    SnapshotPoint,
    SourceRecord,
)
from kstream.runtime.rolling import RollingOperator
from kstream.runtime.windows import (
    FixedWindowOperator,
    SessionWindowOperator,
    SlidingWindowOperator,
)
from kstream.serde import JsonSerde, Serde, SerdeError
from kstream.state.base import KeyedStateBackend, TableSpec

log = logging.getLogger(__name__)

_INTERNAL_FIELDS = (
    InternalRecord._fields.index("key"),
    InternalRecord._fields.index("value"),
    InternalRecord._fields.index("timestamp"),
)
_EXTRACTOR_ERRORS = (KeyError, TypeError, ValueError, IndexError, AttributeError)


class _QueuedBarrier(NamedTuple):
    """A checkpoint trigger that met a held-back source input, with its position."""

    barrier: Barrier
    position: int | None


class _Reader:
    """Decodes one input topic's batches (per batch; per record only on failure)."""

    def __init__(
        self,
        entry: Operator,
        key_serde: Serde,
        value_serde: Serde,
        extractor: Callable[[Any, int], int] | None,
    ) -> None:
        self.entry = entry
        self.kd = key_serde.deserialize
        self.vd = value_serde.deserialize
        self.extractor = extractor

    def decode(
        self, raw: Sequence[Sequence[Any]], fields: tuple[int, int, int] = (0, 1, 2)
    ) -> tuple[list[Any], list[Any], list[int], list[tuple[int, str]]]:
        """``(keys, values, timestamps, failures)`` from the ``fields`` (key, value,
        timestamp indexes) of each raw record; failures are ``(index, reason)``."""
        kd, vd, ex = self.kd, self.vd, self.extractor
        ki, vi, ti = fields
        try:
            keys = [kd(r[ki]) for r in raw]
            values = [vd(r[vi]) for r in raw]
            stamps = (
                [r[ti] for r in raw]
                if ex is None
                else [ex(v, r[ti]) for v, r in zip(values, raw, strict=True)]
            )
            return keys, values, stamps, []
        except (SerdeError, *_EXTRACTOR_ERRORS):
            pass  # slow path below finds which records fail and why
        keys, values, stamps, failures = [], [], [], []
        for i, r in enumerate(raw):
            try:
                k, v = kd(r[ki]), vd(r[vi])
                t = r[ti] if ex is None else ex(v, r[ti])
            except SerdeError as e:
                failures.append((i, str(e)))
                continue
            except _EXTRACTOR_ERRORS as e:
                failures.append((i, f"timestamp extractor failed: {type(e).__name__}: {e}"))
                continue
            keys.append(k)
            values.append(v)
            stamps.append(t)
        return keys, values, stamps, failures


def _unseen(
    records: Sequence[SourceRecord], position: int | None, metrics: dict[str, int]
) -> Sequence[SourceRecord]:
    """``records`` without those at offsets the channel already processed.

    A task never processes an offset twice, whatever its consumer delivers: a seek
    raced by the client's own start-offset lookup of a freshly assigned partition
    (librdkafka resets the fetch position to the group's committed offset or
    ``auto.offset.reset`` after the seek) delivers records again from below the
    restored position, even within one batch. The common case (increasing offsets
    from ``position`` on) is one pass in C.
    """
    offsets = [r[3] for r in records]
    if (position is None or offsets[0] >= position) and all(
        map(lt, offsets, islice(offsets, 1, None))
    ):
        return records
    kept: list[SourceRecord] = []
    nxt = -1 if position is None else position
    for r in records:
        if r[3] >= nxt:
            kept.append(r)
            nxt = r[3] + 1
    metrics["restored_skipped"] += len(records) - len(kept)
    return kept


class Task:
    """Runs one ``TaskSpec`` of a ``JobPlan`` over a keyed-state backend.

    ``attempt`` is the job attempt this task runs in (records of older attempts on
    internal inputs are dropped). ``restore_positions`` (from a ``SnapshotPoint``)
    makes the task skip internal records that its restored state already holds.
    ``on_snapshot`` is called at each snapshot point, synchronously, while the state
    is exactly the snapshot's; the worker takes the synchronous part of its snapshot
    there. ``bounded=True`` runs a batch job: inputs end with ``EndOfInput``/
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
        on_snapshot: Callable[[SnapshotPoint], None] | None = None,
        watermark_interval_s: float = 0.2,
        now: float = 0.0,
    ) -> None:
        self.spec = plan.task(task) if isinstance(task, str) else task
        self.task_id = self.spec.task_id
        self.plan = plan
        self.backend = backend
        self.attempt = attempt
        self.bounded = bounded
        self.on_snapshot = on_snapshot
        self.watermark_interval_s = watermark_interval_s
        self.watermark = MIN_TS
        self.finished = False
        self.metrics: dict[str, int] = {
            "records_in": 0,
            "late_dropped": 0,
            "late_side_output": 0,
            "stale_dropped": 0,
            "restored_skipped": 0,
            "dead_letters": 0,
            "join_unmatched": 0,
            "stale_barriers": 0,
        }
        self._out: list[Output] = []
        self._now = now
        self._last_wm_emit = now
        self._emitted_wm = MIN_TS
        self._pending: int | None = None
        self._readers: dict[str, _Reader] = {}
        self._ops: list[Operator] = []
        self._build(plan)
        self._channels: dict[tuple[str, int, str | None], Channel] = {}
        self._marks = backend.table(TableSpec("task.watermarks"))
        self._build_channels(plan, now, restore_positions or {})
        for (topic, partition, up), wm in self._marks.scan(()):
            c = self._channels.get((topic, partition, up or None))
            if c is not None:
                c.watermark = wm
        self._time_channels = [c for c in self._channels.values() if c.holds_time]
        self._source_channels = [c for c in self._channels.values() if c.upstream is None]
        self._has_internal = any(c.upstream is not None for c in self._channels.values())

    # ---- construction -------------------------------------------------------------

    def _build(self, plan: JobPlan) -> None:
        stage = self.spec.stage
        nodes = plan.nodes_of(stage)
        internal_by_keyby = {t.key_by_node: t for t in plan.internal_topics}
        self._state_ids = operator_ids(plan)
        ops: dict[int, Operator] = {}
        internal_inputs: dict[int, Operator] = {}
        for n in nodes:
            op = self._operator(n, internal_by_keyby)
            ops[n.id] = op
            self._ops.append(op)
            if n.kind in ("source", "table"):
                self._readers[n.params["topic"]] = _Reader(
                    op, n.params["key_serde"], n.params["value_serde"], n.params.get("timestamp")
                )
            for in_port, (parent, port) in enumerate(n.parents):
                if parent.id in ops:
                    ops[parent.id].connect(port, op, in_port)
                    continue
                # A key_by of an upstream stage: read its repartition topic.
                topic = internal_by_keyby[parent.id]
                if parent.id not in internal_inputs:
                    entry = Passthrough(topic.name)
                    internal_inputs[parent.id] = entry
                    self._readers[topic.name] = _Reader(entry, topic.key_serde, JsonSerde(), None)
                internal_inputs[parent.id].connect(0, op, in_port)
        self._stateful = [op for op in self._ops if op.stateful]

    def _operator(self, n: Node, internal_by_keyby: Mapping[int, Any]) -> Operator:
        p = n.params
        if n.kind in ("source", "table"):
            return Passthrough(n.name)
        if n.kind == "map":
            return MapOp(n.name, p["fn"])
        if n.kind == "filter":
            return FilterOp(n.name, p["fn"])
        if n.kind == "flat_map":
            return FlatMapOp(n.name, p["fn"])
        if n.kind == "key_by":
            t = internal_by_keyby[n.id]
            return KeyByOp(n.name, p["fn"], t.name, t.partitions, t.key_serde, self._out)
        if n.kind == "sink":
            return SinkOp(n.name, p["topic"], p["key_serde"], p["value_serde"], self._out)
        # Stateful operators are named by their stable id; their state lives under it.
        sid = self._state_ids.get(n.id, n.name)
        if n.kind == "window":
            spec, agg, allowed = p["spec"], p["aggregation"], p["allowed_lateness_ms"]
            trigger = (p.get("emit", "final"), p.get("early_fire_ms"))
            if isinstance(spec, (Tumbling, Hopping)):
                return FixedWindowOperator(
                    sid, sid, self.backend, spec, agg, allowed, self.metrics, *trigger
                )
            if isinstance(spec, Session):
                return SessionWindowOperator(
                    sid, sid, self.backend, spec, agg, allowed, self.metrics, *trigger
                )
            if isinstance(spec, Sliding):
                return SlidingWindowOperator(
                    sid, sid, self.backend, spec, agg, allowed, self.metrics, *trigger
                )
            raise TypeError(f"unknown window spec {spec!r}")
        if n.kind == "rolling":
            return RollingOperator(sid, sid, self.backend, p["aggregation"], p["emit"])
        if n.kind == "process":
            return ProcessOperator(sid, sid, self.backend, p["fn"], p["state"])
        if n.kind == "join_table":
            return TableJoinOperator(sid, sid, self.backend, p["joiner"], p["left"], self.metrics)
        if n.kind == "join_window":
            return IntervalJoinOperator(
                sid,
                sid,
                self.backend,
                p["joiner"],
                p["before_ms"],
                p["after_ms"],
                p["allowed_lateness_ms"],
                self.metrics,
                p["how"],
            )
        raise TypeError(f"unknown operator kind {n.kind!r}")

    def _build_channels(
        self, plan: JobPlan, now: float, restore: Mapping[tuple[str, int], Position]
    ) -> None:
        strategies: dict[str, WatermarkStrategy] = {
            n.params["topic"]: n.params["watermark"]
            for n in plan.topology.nodes
            if n.kind == "source"
        }
        self._ooo = {t: s.max_out_of_orderness_ms for t, s in strategies.items()}
        timeouts = [s.idle_timeout_s for s in strategies.values() if s.idle_timeout_s]
        internal_idle = max(timeouts) if timeouts else None
        for inp in self.spec.inputs:
            pos = restore.get((inp.topic, inp.partition))
            if inp.kind is InputKind.INTERNAL:
                for up in inp.upstream_tasks:
                    c = Channel(inp.topic, inp.partition, inp.kind, up, internal_idle, now)
                    if isinstance(pos, Mapping) and up in pos:
                        c.position = pos[up]
                    self._channels[(inp.topic, inp.partition, up)] = c
            else:
                strategy = strategies.get(inp.topic)
                c = Channel(
                    inp.topic,
                    inp.partition,
                    inp.kind,
                    None,
                    strategy.idle_timeout_s if strategy else None,
                    now,
                )
                if isinstance(pos, int):
                    c.position = pos
                self._channels[(inp.topic, inp.partition, None)] = c

    # ---- what the worker calls ----------------------------------------------------

    def late_counts(self) -> dict[str, tuple[int, int]]:
        """Per operator that saw late records: (dropped, sent to the side output)."""
        return {
            op.name: (op.late_dropped, op.late_side_output)
            for op in self._ops
            if op.late_dropped or op.late_side_output
        }

    def drain(self) -> list[Output]:
        """The outputs produced since the last drain, in order."""
        out = self._out[:]
        self._out.clear()
        return out

    def paused_inputs(self) -> frozenset[tuple[str, int]]:
        """Partitions to pause: every channel of them is held back by alignment."""
        by_tp: dict[tuple[str, int], list[Channel]] = {}
        for c in self._channels.values():
            by_tp.setdefault(c.tp, []).append(c)
        return frozenset(
            tp
            for tp, cs in by_tp.items()
            if all(c.blocked_on is not None or c.ended for c in cs)
            and any(c.blocked_on is not None for c in cs)
        )

    def source_watermarks(self) -> dict[tuple[str, int], tuple[int, bool]]:
        """``(watermark, ended)`` of each user-topic source partition (not tables):
        what watermark alignment compares."""
        return {c.tp: (c.watermark, c.ended) for c in self._source_channels if c.holds_time}

    def seek_positions(self) -> dict[tuple[str, int], int | None]:
        """Where the worker should start reading each input partition (``None``:
        the job's start position). Internal partitions start at the lowest restored
        upstream position; the task skips what each upstream had before its own."""
        seek: dict[tuple[str, int], int | None] = {}
        for c in self._channels.values():
            if c.tp not in seek:
                seek[c.tp] = c.position
            elif seek[c.tp] is not None:
                seek[c.tp] = None if c.position is None else min(seek[c.tp] or 0, c.position)
        return seek

    def feed_source(
        self, topic: str, partition: int, records: Sequence[SourceRecord], now: float
    ) -> None:
        """Process a batch of raw records from a user topic partition."""
        self._now = now
        c = self._channel(topic, partition, None)
        if c.blocked_on is not None or c.buffer:
            c.buffer.append(records)
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
        self._now = now
        self._internal_items(topic, partition, items)
        self._update_watermark()

    def end_input(self, topic: str, partition: int, now: float) -> None:
        """A user topic partition is exhausted (bounded run reached its end offset)."""
        self._now = now
        c = self._channel(topic, partition, None)
        if c.blocked_on is not None or c.buffer:
            c.buffer.append(EndOfInput())
            return
        c.ended = True
        self._after_end()

    def trigger_checkpoint(self, checkpoint_id: int, attempt: int, now: float) -> None:
        """Inject ``Barrier(checkpoint_id, attempt, current watermark)`` on the
        task's user-topic inputs, recording their positions. No-op for tasks that
        only read internal topics (their barriers arrive from upstream)."""
        self._now = now
        if not self._source_channels:
            return
        if self.bounded:
            c = self._source_channels[0]
            raise PipelinedEventError(
                Barrier(checkpoint_id, attempt, self.watermark), c.topic, c.partition, self.task_id
            )
        if attempt < self.attempt:
            self.metrics["stale_barriers"] += 1
            return
        barrier = Barrier(checkpoint_id, self.attempt, self.watermark)
        live = [c for c in self._source_channels if not c.ended]
        if not live:
            if not self._has_internal:
                self._pending = checkpoint_id
                self._check_aligned()
            return
        for c in live:
            if c.blocked_on is None and not c.buffer:
                self._on_barrier(c, barrier, c.position)
            else:  # still held by an earlier barrier: inject after what is buffered
                c.buffer.append(_QueuedBarrier(barrier, self._buffered_end(c)))

    def tick(self, now: float, wall_ms: int | None = None) -> None:
        """Let processing time pass: idleness and periodic watermark emission; with
        ``wall_ms`` (the wall clock, epoch ms) also processing-time timers and triggers."""
        self._now = now
        if wall_ms is not None:
            for op in self._stateful:
                op.on_processing_time(wall_ms)
        self._update_watermark()

    # ---- internals ----------------------------------------------------------------

    def _channel(self, topic: str, partition: int, upstream: str | None) -> Channel:
        c = self._channels.get((topic, partition, upstream))
        if c is None:
            who = "" if upstream is None else f" from upstream task {upstream!r}"
            raise KeyError(
                f"task {self.task_id} does not read {topic}[{partition}]{who}; "
                f"it reads {sorted({(ch.topic, ch.partition) for ch in self._channels.values()})}"
            )
        return c

    def _source_batch(self, c: Channel, records: Sequence[SourceRecord]) -> None:
        if c.ended:
            return  # bounded: past the end offsets; the next run reads them from the position
        records = _unseen(records, c.position, self.metrics)
        if not records:
            return
        reader = self._readers[c.topic]
        keys, values, stamps, failures = reader.decode(records)
        for i, reason in failures:
            r = records[i]
            self._out.append(DeadLetter(c.topic, c.partition, r[3], reason, r[0], r[1]))
        self.metrics["dead_letters"] += len(failures)
        self.metrics["records_in"] += len(records)
        c.position = records[-1][3] + 1
        c.last_active = self._now
        if stamps and c.kind is InputKind.SOURCE:
            self._emit_timed(c, reader.entry, keys, values, stamps)
        else:
            reader.entry.emit(keys, values, stamps)

    def _emit_timed(
        self, c: Channel, entry: Operator, keys: list[Any], values: list[Any], stamps: list[int]
    ) -> None:
        """Process a source batch with per-record watermarks.

        The partition's watermark before record *i* is ``max(its watermark before the
        batch, max(stamps[:i]) - out_of_orderness)`` (a running maximum, computed in C),
        and the task's is the minimum of that and the other inputs'. A record at or
        after the task watermark just before it is treated alike under any older
        watermark (each window containing it ends after it, so none has fired), so
        only a record *behind* it needs that exact watermark: the batch is cut there,
        the task advances (windows fire, downstream gets a ``Watermark``) and goes on.
        In-order input and disorder within the bound make no cut.
        """
        ooo = self._ooo.get(c.topic, 0)
        running = list(accumulate(stamps, max))
        start_wm = c.watermark
        if running[-1] - ooo > start_wm:
            c.watermark = running[-1] - ooo
        # Record i >= 1 is behind its partition's running watermark when
        # stamps[i] + ooo < running[i - 1].
        lifted = stamps if ooo == 0 else [t + ooo for t in stamps]
        if not any(map(lt, islice(lifted, 1, None), running)):
            entry.emit(keys, values, stamps)
            return
        now = self._now
        others = [
            x.watermark
            for x in self._time_channels
            if x is not c and not x.ended and not x.idle(now)
        ]
        cap = min(others) if others else MAX_TS
        lo = 0
        for i in range(1, len(stamps)):
            if lifted[i] >= running[i - 1]:
                continue
            before = min(cap, max(start_wm, running[i - 1] - ooo))
            if stamps[i] >= before or before <= self.watermark:
                continue  # not behind the task watermark, or the task is there already
            entry.emit(keys[lo:i], values[lo:i], stamps[lo:i])
            lo = i
            self._advance(before)
            self._emit_watermark()
        entry.emit(keys[lo:], values[lo:], stamps[lo:])

    def _internal_items(
        self, topic: str, partition: int, items: Sequence[InternalRecord | InternalEvent]
    ) -> None:
        channels = self._channels
        run: list[InternalRecord] = []
        attempt = self.attempt
        for it in items:
            c = channels.get((topic, partition, it.upstream)) or self._channel(
                topic, partition, it.upstream
            )
            if c.position is not None and it.offset < c.position:
                # Already in the state: below the restored position, or delivered again
                # by a consumer that rewound (see _unseen).
                self.metrics["restored_skipped"] += 1
                continue
            if it.attempt < attempt:
                self.metrics["stale_dropped"] += 1  # a failed attempt's output
                continue
            if c.blocked_on is not None:
                c.buffer.append(it)
                continue
            c.position = it.offset + 1
            c.last_active = self._now
            if type(it) is InternalRecord:
                run.append(it)
                continue
            self._internal_run(topic, partition, run)
            run = []
            assert isinstance(it, InternalEvent)
            self._on_event(c, it.event, it.offset)
        self._internal_run(topic, partition, run)

    def _internal_run(self, topic: str, partition: int, run: list[InternalRecord]) -> None:
        if not run:
            return
        reader = self._readers[topic]
        keys, values, stamps, failures = reader.decode(run, _INTERNAL_FIELDS)
        for i, reason in failures:
            r = run[i]
            self._out.append(DeadLetter(topic, partition, r.offset, reason, r.key, r.value))
        self.metrics["dead_letters"] += len(failures)
        self.metrics["records_in"] += len(run)
        reader.entry.emit(keys, values, stamps)

    def _on_event(self, c: Channel, event: StreamEvent, offset: int | None) -> None:
        if isinstance(event, Watermark):
            if event.timestamp > c.watermark:
                c.watermark = event.timestamp
                # The records after it are judged against it (per-record watermarks).
                self._update_watermark(emit=False)
        elif isinstance(event, EndOfInput):
            c.ended = True
            self._after_end()
        elif isinstance(event, Barrier):
            if self.bounded:
                raise PipelinedEventError(event, c.topic, c.partition, self.task_id)
            self._on_barrier(c, event, None if offset is None else offset + 1)

    def _on_barrier(self, c: Channel, b: Barrier, position: int | None) -> None:
        if self._pending is not None and b.checkpoint_id < self._pending:
            self.metrics["stale_barriers"] += 1  # an aborted checkpoint's straggler
            return
        if self._pending is not None and b.checkpoint_id > self._pending:
            self._abort_alignment(
                f"barrier {b.checkpoint_id} arrived on {c.describe()} before barrier "
                f"{self._pending} aligned"
            )
        self._pending = b.checkpoint_id
        c.blocked_on = b.checkpoint_id
        c.barrier_timestamp = b.timestamp
        c.barrier_position = position
        self._check_aligned()

    def _abort_alignment(self, reason: str) -> None:
        assert self._pending is not None
        self._out.append(AlignmentAborted(self._pending, reason))
        released = [c for c in self._channels.values() if c.blocked_on == self._pending]
        self._pending = None
        for c in released:
            c.blocked_on = None
        for c in released:
            self._replay(c)

    def _check_aligned(self) -> None:
        n = self._pending
        if n is None:
            return
        live = [c for c in self._channels.values() if not c.ended]
        if any(c.blocked_on != n for c in live):
            return
        # (1) Barrier timestamps are watermarks: fire what they allow before the snapshot.
        for c in live:
            if c.barrier_timestamp > c.watermark:
                c.watermark = c.barrier_timestamp
        self._update_watermark(emit=False)
        for op in self._stateful:  # results due per checkpoint belong to epoch n
            op.before_snapshot()
        # (2) Snapshot point: state now is exactly checkpoint n's.
        self._snapshot(n, final=False)
        # (3) Forward the barrier downstream, carrying the task watermark.
        self._emitted_wm = max(self._emitted_wm, self.watermark)
        self._broadcast(Barrier(n, self.attempt, self.watermark))
        # (4) Release the inputs and replay what arrived after their barrier.
        self._pending = None
        for c in live:
            c.blocked_on = None
        for c in live:
            self._replay(c)
        self._update_watermark()

    def _snapshot(self, checkpoint_id: int | None, *, final: bool) -> None:
        # Input watermarks belong to the state: a restored task judges the records it
        # reads again against the watermarks the failure-free run had there.
        for key, c in self._channels.items():
            if c.watermark > MIN_TS:
                self._marks.put((key[0], key[1], key[2] or ""), c.watermark)
        positions: dict[tuple[str, int], Position] = {}
        for c in self._channels.values():
            pos = c.barrier_position if (c.blocked_on is not None and not final) else c.position
            if c.upstream is None:
                positions[c.tp] = pos
            else:
                per = positions.setdefault(c.tp, {})
                assert isinstance(per, dict)
                if pos is not None:
                    per[c.upstream] = pos
        point = SnapshotPoint(self.task_id, checkpoint_id, self.attempt, positions, final)
        self._out.append(point)
        if self.on_snapshot is not None:
            self.on_snapshot(point)

    def _replay(self, c: Channel) -> None:
        pending, c.buffer = c.buffer, []
        if not pending:
            return
        if c.upstream is not None:
            self._internal_items(c.topic, c.partition, pending)
            return
        for i, item in enumerate(pending):
            if c.blocked_on is not None:
                c.buffer.extend(pending[i:])
                return
            if isinstance(item, EndOfInput):
                c.ended = True
                self._after_end()
            elif isinstance(item, _QueuedBarrier):
                self._on_barrier(c, item.barrier, item.position)
            else:
                self._source_batch(c, item)

    @staticmethod
    def _buffered_end(c: Channel) -> int | None:
        """The position after everything buffered for source channel ``c``."""
        for item in reversed(c.buffer):
            if isinstance(item, _QueuedBarrier):
                return item.position
            if isinstance(item, list | tuple) and item:
                last: int = item[-1][3]
                return last + 1
        return c.position

    def _broadcast(self, event: StreamEvent) -> None:
        for o in self.spec.outputs:
            internal = o.kind is OutputKind.INTERNAL
            if internal or not isinstance(event, Watermark):
                self._out.append(OutputEvent(o.topic, internal, event))

    def _update_watermark(self, *, emit: bool = True) -> None:
        now = self._now
        live = [c for c in self._time_channels if not c.ended]
        if not live:
            new = self.watermark
        else:
            active = [c.watermark for c in live if not c.idle(now)]
            new = min(active) if active else self.watermark
        self._advance(new)
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

    def _advance(self, new: int) -> None:
        """The task watermark moves up to ``new`` (never back): operators fire."""
        if new > self.watermark:
            self.watermark = new
            for op in self._stateful:
                op.advance(new)

    def _emit_watermark(self) -> None:
        if self.watermark > self._emitted_wm:
            self._emitted_wm = self.watermark
            self._last_wm_emit = self._now
            self._broadcast(Watermark(self.watermark))

    def _after_end(self) -> None:
        if self.finished:
            return
        if all(c.ended for c in self._channels.values()):
            self._finish()
        else:
            self._update_watermark()
            self._check_aligned()  # an ended input no longer holds alignment back

    def _finish(self) -> None:
        """All inputs ended: fire everything, tell downstream, hand over final state."""
        self.finished = True
        for op in self._stateful:
            op.finish()
        self._emitted_wm = MAX_TS
        self._broadcast(EndOfInput())
        if self.bounded:
            self._snapshot(None, final=True)
