"""The exactly-once sink's write-ahead buffer (docs/design.md §7): the open epoch and the sealed
epochs kept until their checkpoint is committed.

In memory up to a budget; past it the epochs' records are spilled to local disk
(:mod:`kstream.sinkbuffer.spill`, the only I/O). :mod:`kstream.kafka.exactly_once_sink` publishes
what this holds.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterable

from kstream.sinkbuffer.blob import encode_blob, encode_segment
from kstream.sinkbuffer.blobdecode import MemorySegment, decode_blob
from kstream.sinkbuffer.budget import MemoryBudget
from kstream.sinkbuffer.epochs import (
    Chunk,
    ColumnBatch,
    Epoch,
    OutputRecord,
    Segment,
    SinkStateError,
)
from kstream.sinkbuffer.spill import SegmentedBlob, SpillDir

log = logging.getLogger(__name__)

#: Estimated Python memory of one buffered record besides its key and value bytes: list
#: slots and object headers of a column batch's key, value and timestamp; a general
#: record's tuple costs more.
BATCH_RECORD_OVERHEAD = 120
ROW_RECORD_OVERHEAD = 200


def _lengths(values: list[bytes | None]) -> int:
    try:
        return sum(map(len, values))  # type: ignore[arg-type]
    except TypeError:  # a None among them
        return sum(len(v) for v in values if v is not None)


def chunk_cost(c: Chunk) -> int:
    """Estimated bytes of memory a chunk holds (what the budget counts)."""
    if isinstance(c, ColumnBatch):
        return _lengths(c.keys) + _lengths(c.values) + BATCH_RECORD_OVERHEAD * len(c)
    return sum(row_cost(r) for r in c)


def row_cost(r: OutputRecord) -> int:
    return ROW_RECORD_OVERHEAD + len(r[2] or b"") + len(r[3] or b"")


class EpochBuffer:
    """The write-ahead buffer of one exactly-once sink task.

    Holds one open epoch and the sealed epochs not yet committed, in checkpoint
    order. Barrier ids must increase; checkpoints that were aborted leave their
    sealed epochs here until a later completion subsumes them.

    With ``spill`` and ``budget`` (bytes: a budget of its own; or a :class:`MemoryBudget`
    shared with the worker's other sink buffers), once the records held in memory pass
    the budget (estimated: keys, values and per-record overhead; a shared budget: those
    of every buffer charged to it) the growing buffer's in-memory records of every epoch
    are encoded and appended to its spill file, so memory stays about the budget
    whatever an interval outputs. Without ``spill`` everything stays in memory.
    """

    def __init__(
        self, spill: SpillDir | None = None, budget: int | MemoryBudget | None = None
    ) -> None:
        if spill is not None and budget is None:
            raise ValueError("a spilling buffer needs a positive memory budget, got None")
        self.open = Epoch()
        self.sealed: list[Epoch] = []
        self.last_sealed: int | None = None
        self.last_committed: int | None = None
        self.spill = spill
        self.budget: MemoryBudget | None = None
        if spill is not None:
            self.budget = budget if isinstance(budget, MemoryBudget) else MemoryBudget(budget or 0)
        self.held = 0  # estimated bytes of the records held in memory (charged to the budget)
        self.spills = 0  # segments spilled so far (monitoring, tests)

    def append(self, record: OutputRecord) -> None:
        self.open.append(record)
        self._held(row_cost(record))

    def extend(self, records: Iterable[OutputRecord]) -> None:
        records = list(records)
        self.open.extend(records)
        self._held(sum(map(row_cost, records)))

    def append_columns(self, batch: ColumnBatch) -> None:
        self.open.append_columns(batch)
        self._held(chunk_cost(batch))

    def _held(self, cost: int) -> None:
        self.held += cost
        b = self.budget
        if b is None or not b.charge(cost) or self.held < b.min_spill:
            return
        if not self.spills:
            log.info(
                "sink buffer past its memory budget (%d bytes, %d held by this worker's "
                "sink buffers): spilling to %s",
                b.limit,
                b.held,
                self.spill.path if self.spill else None,
            )
        for e in (*self.sealed, self.open):
            self._spill_epoch(e)
        b.charge(-self.held)
        self.held = 0

    def _spill_epoch(self, e: Epoch) -> None:
        """Move the in-memory records of ``e`` into a segment (on disk when spilling)."""
        if not e.chunks:
            return
        records = sum(map(len, e.chunks))
        data = encode_segment(e.chunks)
        seg: Segment
        if self.spill is not None:
            seg = self.spill.write(data, records, e.spilled[-1] if e.spilled else None)
        else:
            seg = MemorySegment(records, data)
        e.spill_chunks(seg)
        self.spills += 1

    def seal(self, checkpoint_id: int) -> None:
        """Seal the open epoch as epoch ``checkpoint_id`` and open the next one."""
        floor = max(x for x in (self.last_sealed, self.last_committed, -1) if x is not None)
        if checkpoint_id <= floor:
            raise SinkStateError(
                f"barrier {checkpoint_id} is not above the last sealed/committed epoch {floor}"
            )
        self.open.seal(checkpoint_id)
        self.sealed.append(self.open)
        self.last_sealed = checkpoint_id
        self.open = Epoch()

    def due(self, checkpoint_id: int) -> list[Epoch]:
        """Sealed epochs at or below ``checkpoint_id`` (what its completion commits)."""
        return [
            e
            for e in self.sealed
            if e.checkpoint_id is not None and e.checkpoint_id <= checkpoint_id
        ]

    def committed(self, epochs: list[Epoch], checkpoint_id: int) -> None:
        """Mark ``epochs`` committed (checkpoint ``checkpoint_id`` published) and drop them."""
        for e in epochs:
            e.mark_committed()
        done = {id(e) for e in epochs}
        for e in epochs:
            e.release()
        self.sealed = [e for e in self.sealed if id(e) not in done]
        self._recount()
        if self.last_committed is None or checkpoint_id > self.last_committed:
            self.last_committed = checkpoint_id

    def drop_through(self, checkpoint_id: int) -> int:
        """Forget sealed epochs ≤ ``checkpoint_id`` (already published, says a marker)."""
        before = sum(e.size for e in self.sealed)
        keep = [
            e
            for e in self.sealed
            if e.checkpoint_id is not None and e.checkpoint_id > checkpoint_id
        ]
        for e in self.sealed:
            if e not in keep:
                e.release()
        self.sealed = keep
        self._recount()
        if self.last_committed is None or checkpoint_id > self.last_committed:
            self.last_committed = checkpoint_id
        return before - sum(e.size for e in self.sealed)

    def _recount(self) -> None:
        held = sum(chunk_cost(c) for e in (*self.sealed, self.open) for c in e.chunks)
        if self.budget is not None:
            self.budget.charge(held - self.held)
        self.held = held

    def blob(self) -> bytes:
        """Every sealed, uncommitted epoch in the blob format, as bytes."""
        b = self.snapshot_blob()
        if isinstance(b, bytes):
            return b
        out = io.BytesIO()
        try:
            b.write_to(out)
        finally:
            b.close()
        return out.getvalue()

    def snapshot_blob(self) -> bytes | SegmentedBlob:
        """Every sealed, uncommitted epoch in the blob format: encoded now
        (:func:`encode_blob`) when nothing was spilled, else a :class:`SegmentedBlob`
        the upload thread writes from the spill files (the sealed epochs' records still
        in memory are spilled first)."""
        if not any(e.spilled for e in self.sealed):
            return encode_blob(self.sealed)
        for e in self.sealed:
            self._spill_epoch(e)
        self._recount()
        return SegmentedBlob(
            [(e.checkpoint_id or 0, [s.pin() for s in e.spilled]) for e in self.sealed]
        )

    def close(self) -> None:
        """Release every epoch's spill files and the spill directory (the buffer is done)."""
        for e in (*self.sealed, self.open):
            e.release()
        if self.budget is not None:
            self.budget.charge(-self.held)
        self.held = 0
        if self.spill is not None:
            self.spill.close()

    @classmethod
    def from_blob(
        cls,
        blob: bytes | None,
        spill: SpillDir | None = None,
        budget: int | MemoryBudget | None = None,
    ) -> EpochBuffer:
        """A buffer holding the sealed epochs of ``blob`` and an empty open epoch."""
        buf = cls(spill, budget)
        if blob:
            buf.sealed = decode_blob(blob)
            if buf.sealed:
                buf.last_sealed = buf.sealed[-1].checkpoint_id
            buf._recount()
        return buf
