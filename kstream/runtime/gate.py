"""A task's input gate: its channels, what they hold back, and where they resume.

One channel per source/table partition, one per upstream task inside an internal
partition (:mod:`kstream.runtime.channels`). Barrier alignment (docs/design.md §4, §5.4) is
kept here: a channel that delivered barrier *n* is blocked and buffers what arrives
after it until every live channel delivered *n*; a newer barrier before that aborts
*n*. ``holding``: the task's snapshot is being taken (the task defers all work).
The task decides what the events mean and processes what the gate releases.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import islice
from operator import itemgetter, lt
from typing import NamedTuple

from kstream.api.time import WatermarkStrategy
from kstream.elements.events import MAX_TS, Barrier
from kstream.elements.records import Position, SourceRecord
from kstream.plan.model import InputKind, JobPlan, TaskSpec
from kstream.runtime.channels import Channel

TP = tuple[str, int]


class QueuedBarrier(NamedTuple):
    """A checkpoint trigger that met a held-back source input, with its position."""

    barrier: Barrier
    position: int | None


_OFFSET = itemgetter(3)


def second_copy(c: Channel, writer: str | None, seq: int) -> bool:
    """Whether an internal record or event that ``writer`` numbered ``seq`` on ``c``'s
    partition was taken already: the idempotent producer wrote it twice (see
    :mod:`kstream.kafka.internal`). If not, it is taken now (asked only when it is
    processed, not when it waits in the channel's buffer: a copy that arrives while the
    first waits is dropped when the buffer is replayed)."""
    if seq <= c.seqs.get(writer, -1):
        return True
    c.seqs[writer] = seq
    return False


def unseen(
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
    offsets = list(map(_OFFSET, records))
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


class InputGate:
    """The channels of one task, their alignment and their positions."""

    def __init__(
        self,
        plan: JobPlan,
        spec: TaskSpec,
        now: float,
        restore: Mapping[TP, Position],
        watermarks: Mapping[tuple[str, int, str], int] | None = None,
    ) -> None:
        """The channels of ``spec``'s inputs, at their ``restore`` positions and
        ``watermarks`` (by topic, partition and upstream task, "" for a source's)."""
        self.task_id = spec.task_id
        strategies: dict[str, WatermarkStrategy] = plan.watermark_strategies
        self.out_of_orderness = {t: s.max_out_of_orderness_ms for t, s in strategies.items()}
        timeouts = [s.idle_timeout_s for s in strategies.values() if s.idle_timeout_s]
        internal_idle = max(timeouts) if timeouts else None
        self.channels: dict[tuple[str, int, str | None], Channel] = {}
        for inp in spec.inputs:
            pos = restore.get((inp.topic, inp.partition))
            if inp.kind is InputKind.INTERNAL:
                for up in inp.upstream_tasks:
                    c = Channel(inp.topic, inp.partition, inp.kind, up, internal_idle, now)
                    if isinstance(pos, Mapping) and up in pos:
                        c.position = pos[up]
                    self.channels[(inp.topic, inp.partition, up)] = c
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
                self.channels[(inp.topic, inp.partition, None)] = c
        for (topic, partition, up), wm in (watermarks or {}).items():
            marked = self.channels.get((topic, partition, up or None))
            if marked is not None:
                marked.watermark = wm
        self.time_channels = [c for c in self.channels.values() if c.holds_time]
        self.source_channels = [c for c in self.channels.values() if c.upstream is None]
        self.has_internal = any(c.upstream is not None for c in self.channels.values())
        self.pending: int | None = None  # the checkpoint being aligned
        self.holding = False  # a snapshot is being taken: the task defers all work
        # Alignment costs O(channels) per checkpoint, not per barrier: a task reads one
        # channel per upstream task of each internal partition (1 024 at 1 024
        # partitions), and every barrier asks whether all are aligned. ``aligned``
        # resumes its scan where it last found a channel still to deliver (channels
        # only become blocked or ended until the pending checkpoint is released).
        self._order = list(self.channels.values())
        self._scan: tuple[int | None, int] = (None, 0)  # (checkpoint, index) scanned to
        self._blocked = 0  # channels blocked on a barrier (paused_inputs: none, nothing)
        by_tp: dict[TP, list[Channel]] = {}
        for c in self.channels.values():
            by_tp.setdefault(c.tp, []).append(c)
        self._by_tp = list(by_tp.items())
        self._unblocked: dict[TP, int] = {}  # per partition, the scan of _held_back so far

    def channel(self, topic: str, partition: int, upstream: str | None) -> Channel:
        c = self.channels.get((topic, partition, upstream))
        if c is None:
            who = "" if upstream is None else f" from upstream task {upstream!r}"
            raise KeyError(
                f"task {self.task_id} does not read {topic}[{partition}]{who}; "
                f"it reads {sorted({(ch.topic, ch.partition) for ch in self.channels.values()})}"
            )
        return c

    def live(self) -> list[Channel]:
        return [c for c in self.channels.values() if not c.ended]

    def all_ended(self) -> bool:
        return all(c.ended for c in self.channels.values())

    def others_watermark(self, c: Channel, now: float) -> int:
        """The least watermark of the live, not idle time channels other than ``c``
        (``MAX_TS``: none): what caps the task watermark while ``c`` advances."""
        return min(
            (
                x.watermark
                for x in self.time_channels
                if x is not c and not x.ended and not x.idle(now)
            ),
            default=MAX_TS,
        )

    # ---- alignment ----------------------------------------------------------------------------

    def block(self, c: Channel, barrier: Barrier, position: int | None) -> None:
        """``c`` delivered ``barrier`` (resuming at ``position``): hold it back."""
        self.pending = barrier.checkpoint_id
        self._blocked += c.blocked_on is None
        c.blocked_on = barrier.checkpoint_id
        c.barrier_timestamp = barrier.timestamp
        c.barrier_position = position

    def aligned(self) -> list[Channel] | None:
        """The live channels, if every one of them delivered the pending barrier."""
        n = self.pending
        if n is None:
            return None
        done, i = self._scan
        if done != n:
            i = 0
        order = self._order
        while i < len(order):
            c = order[i]
            if not c.ended and c.blocked_on != n:
                self._scan = (n, i)
                return None
            i += 1
        self._scan = (n, i)
        return self.live()

    def release(self, channels: list[Channel]) -> None:
        """The pending checkpoint is done with ``channels``: they flow again."""
        self.pending = None
        self._scan = (None, 0)
        self._unblocked.clear()
        for c in channels:
            self._blocked -= c.blocked_on is not None
            c.blocked_on = None

    def abort(self) -> list[Channel]:
        """Give up aligning the pending checkpoint; the channels it released."""
        released = [c for c in self.channels.values() if c.blocked_on == self.pending]
        self.release(released)
        return released

    @staticmethod
    def buffered_end(c: Channel) -> int | None:
        """The position after everything buffered for source channel ``c``."""
        for item in reversed(c.buffer):
            if isinstance(item, QueuedBarrier):
                return item.position
            if isinstance(item, list | tuple) and item:
                last: int = item[-1][3]
                return last + 1
        return c.position

    # ---- positions ------------------------------------------------------------------------------

    def positions(self, *, final: bool) -> dict[TP, Position]:
        """Where each input resumes from the state as it is now: at its barrier for a
        blocked channel (a checkpoint), else after what was processed; per upstream task
        for internal partitions."""
        positions: dict[TP, Position] = {}
        for c in self.channels.values():
            pos = c.barrier_position if (c.blocked_on is not None and not final) else c.position
            if c.upstream is None:
                positions[c.tp] = pos
            else:
                per = positions.setdefault(c.tp, {})
                assert isinstance(per, dict)
                if pos is not None:
                    per[c.upstream] = pos
        return positions

    def paused_inputs(self, *, firing: bool = False) -> frozenset[TP]:
        """Partitions to pause: every channel of them is held back by alignment; during
        a ``firing`` also the sources and the partitions with records waiting for it."""
        if not firing and not self._blocked:  # asked every loop iteration, of every task
            return frozenset()
        out = [tp for tp, cs in self._by_tp if self._held_back(tp, cs)] if self._blocked else []
        if firing:
            out += [tp for tp, cs in self._by_tp if any(c.buffer or c.upstream is None for c in cs)]
        return frozenset(out)

    def _held_back(self, tp: TP, cs: list[Channel]) -> bool:
        """Every channel of ``tp`` is blocked on a barrier or ended, one at least blocked.
        Asked every loop iteration while a checkpoint aligns, of a partition read from
        1 024 upstream tasks at 1 024 partitions: the scan resumes where it last found a
        channel neither (until ``release``, channels only become blocked or ended)."""
        i = self._unblocked.get(tp, 0)
        while i < len(cs):
            c = cs[i]
            if c.blocked_on is None and not c.ended:
                self._unblocked[tp] = i
                return False
            i += 1
        self._unblocked[tp] = i
        return any(c.blocked_on is not None for c in cs)

    @staticmethod
    def only_records(c: Channel) -> bool:
        """Source channel ``c`` buffers only record batches (that wait for a firing): no
        queued barrier or end of input among them."""
        return all(isinstance(x, list | tuple) for x in c.buffer)

    def seek_positions(self) -> dict[TP, int | None]:
        """Where to start reading each input partition (``None``: the job's start
        position). Internal partitions start at the lowest restored upstream position;
        the task skips what each upstream had before its own."""
        seek: dict[TP, int | None] = {}
        for c in self.channels.values():
            if c.tp not in seek:
                seek[c.tp] = c.position
            elif seek[c.tp] is not None:
                seek[c.tp] = None if c.position is None else min(seek[c.tp] or 0, c.position)
        return seek
