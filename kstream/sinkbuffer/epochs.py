"""Sink epochs (docs/design.md §7): the output of one checkpoint interval, as general records
or as one topic's column batches, and their explicit states open → sealed → committed.

Pure: no I/O. The buffer of a sink task is :mod:`kstream.sinkbuffer.buffer`, its
snapshot form :mod:`kstream.sinkbuffer.blob`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from itertools import repeat
from operator import eq
from typing import overload

Header = tuple[str, bytes | None]
OutputRecord = tuple[str, int | None, bytes | None, bytes | None, int | None, list[Header] | None]
"""A serialized output record: (topic, partition or None, key, value, timestamp ms or None, headers or None)."""


class SinkError(RuntimeError):
    """A sink could not deliver or commit; the message says which task and checkpoint."""


class SinkStateError(SinkError):
    """An illegal transition of a sink epoch or sink (a bug in the caller, never retried)."""


class BlobFormatError(SinkError):
    """A write-ahead buffer blob is corrupt, truncated or of an unknown version."""


# --------------------------------------------------------------------------- epochs


class EpochState(StrEnum):
    """Life of a sink epoch: open → sealed → committed."""

    OPEN = "open"  # receiving records; not yet part of any snapshot
    SEALED = "sealed"  # barrier seen; in the snapshot, waiting for its checkpoint to complete
    COMMITTED = "committed"  # published in a Kafka transaction with its marker


_TRANSITIONS = {
    EpochState.OPEN: EpochState.SEALED,
    EpochState.SEALED: EpochState.COMMITTED,
}


@dataclass(frozen=True, slots=True)
class ColumnBatch:
    """One topic's records as parallel lists, partition and headers ``None`` (a task's
    sink batch, kept by reference: nobody changes the lists once they are written)."""

    topic: str
    keys: list[bytes | None]
    values: list[bytes | None]
    timestamps: list[int]

    def __post_init__(self) -> None:
        n = len(self.keys)
        if len(self.values) != n or len(self.timestamps) != n:
            raise ValueError(
                f"sink batch for {self.topic!r}: {n} keys, {len(self.values)} values and "
                f"{len(self.timestamps)} timestamps (must be equal)"
            )

    def __len__(self) -> int:
        return len(self.keys)


Chunk = ColumnBatch | list[OutputRecord]
"""A run of an epoch's records: a column batch, or general records (``write``/``write_batch``)."""


class Segment:
    """A run of an epoch's records kept out of Python objects: encoded, in a spill file on
    local disk or in memory (:mod:`kstream.sinkbuffer.spill`). ``load`` decodes it."""

    __slots__ = ("records",)

    def __init__(self, records: int) -> None:
        self.records = records

    def load(self) -> Chunk:
        """The segment's records, decoded (BlobFormatError if it is corrupt)."""
        raise NotImplementedError

    def encoded(self) -> bytes:
        """The segment's encoded form (a version-2 blob of one epoch)."""
        raise NotImplementedError

    def pin(self) -> Segment:
        """A segment with the same records that stays readable after ``release`` (what
        a snapshot's blob holds: its upload may outlive the epoch's commit)."""
        raise NotImplementedError

    def release(self) -> None:
        """The epoch is done with this segment (its spill file may go)."""


class Epoch:
    """Output of one epoch as chunks in write order. ``checkpoint_id`` is set when it is sealed.

    ``spilled`` are the epoch's first records, moved out of memory by the buffer when
    it went past its budget; ``chunks`` the records written after the last spill.
    ``size`` counts all records; ``records`` shows them as ``OutputRecord`` tuples.
    """

    __slots__ = ("checkpoint_id", "chunks", "size", "spilled", "state")

    def __init__(
        self,
        checkpoint_id: int | None = None,
        state: EpochState = EpochState.OPEN,
        records: Iterable[OutputRecord] = (),
        *,
        chunks: Iterable[Chunk] = (),
    ) -> None:
        self.checkpoint_id = checkpoint_id
        self.state = state
        self.chunks: list[Chunk] = [c for c in (*chunks, list(records)) if len(c)]
        self.spilled: list[Segment] = []
        self.size = sum(map(len, self.chunks))

    def __repr__(self) -> str:
        return (
            f"Epoch(checkpoint_id={self.checkpoint_id}, state={self.state}, "
            f"size={self.size}, chunks={len(self.chunks)}, spilled={len(self.spilled)})"
        )

    def iter_chunks(self) -> Iterator[Chunk]:
        """Every chunk in write order, spilled segments decoded one at a time."""
        for s in self.spilled:
            yield s.load()
        yield from self.chunks

    def add_spilled(self, segment: Segment) -> None:
        """Append an encoded segment (only before in-memory chunks, as the buffer spills)."""
        if self.chunks:
            raise SinkStateError("a spilled segment must not follow in-memory chunks")
        self.spilled.append(segment)
        self.size += segment.records

    def spill_chunks(self, segment: Segment) -> None:
        """Replace the in-memory chunks by ``segment``, which holds exactly their records."""
        held = sum(map(len, self.chunks))
        if segment.records != held:
            raise SinkStateError(f"a segment of {segment.records} records for {held} in memory")
        self.chunks = []
        self.spilled.append(segment)

    def release(self) -> None:
        """Let go of the spilled segments (after commit, or when dropped)."""
        for s in self.spilled:
            s.release()

    @property
    def records(self) -> EpochRecords:
        """The records as ``OutputRecord`` tuples, in write order (a read-only view)."""
        return EpochRecords(self)

    def _move(self, to: EpochState) -> None:
        if _TRANSITIONS.get(self.state) is not to:
            raise SinkStateError(
                f"sink epoch {self.checkpoint_id}: illegal transition {self.state} -> {to}"
            )
        self.state = to

    def seal(self, checkpoint_id: int) -> None:
        """open → sealed at barrier ``checkpoint_id``."""
        self._move(EpochState.SEALED)
        self.checkpoint_id = checkpoint_id

    def mark_committed(self) -> None:
        """sealed → committed, after its transaction committed."""
        self._move(EpochState.COMMITTED)

    def _check_open(self) -> None:
        if self.state is not EpochState.OPEN:
            raise SinkStateError(f"sink epoch {self.checkpoint_id} is {self.state}: cannot add")

    def _record_chunk(self) -> list[OutputRecord]:
        """The last chunk if it holds records, else a new one."""
        last = self.chunks[-1] if self.chunks else None
        if isinstance(last, list):
            return last
        new: list[OutputRecord] = []
        self.chunks.append(new)
        return new

    def append(self, record: OutputRecord) -> None:
        """Add a record; only an open epoch accepts records."""
        self._check_open()
        self._record_chunk().append(record)
        self.size += 1

    def extend(self, records: Iterable[OutputRecord]) -> None:
        """Add records; only an open epoch accepts records."""
        self._check_open()
        chunk = self._record_chunk()
        before = len(chunk)
        chunk.extend(records)
        self.size += len(chunk) - before
        if not chunk:
            self.chunks.pop()

    def append_columns(self, batch: ColumnBatch) -> None:
        """Add a column batch by reference (no per-record work); only an open epoch accepts it."""
        self._check_open()
        if batch:
            self.chunks.append(batch)
            self.size += len(batch)


class EpochRecords(Sequence[OutputRecord]):
    """An epoch's records as ``OutputRecord`` tuples: a read-only view that builds each
    tuple when it is read (publishing and the blob read the chunks instead)."""

    __slots__ = ("_epoch",)

    def __init__(self, epoch: Epoch) -> None:
        self._epoch = epoch

    def __len__(self) -> int:
        return self._epoch.size

    def __iter__(self) -> Iterator[OutputRecord]:
        for c in self._epoch.iter_chunks():
            if isinstance(c, ColumnBatch):
                yield from zip(
                    repeat(c.topic), repeat(None), c.keys, c.values, c.timestamps, repeat(None)
                )
            else:
                yield from c

    @overload
    def __getitem__(self, i: int) -> OutputRecord: ...

    @overload
    def __getitem__(self, i: slice) -> list[OutputRecord]: ...

    def __getitem__(self, i: int | slice) -> OutputRecord | list[OutputRecord]:
        if isinstance(i, slice) or self._epoch.spilled:
            return list(self)[i]
        n = len(self)
        j = i + n if i < 0 else i
        if not 0 <= j < n:
            raise IndexError(f"record {i} of an epoch of {n}")
        for c in self._epoch.chunks:
            if j < len(c):
                if isinstance(c, ColumnBatch):
                    return (c.topic, None, c.keys[j], c.values[j], c.timestamps[j], None)
                return c[j]
            j -= len(c)
        raise AssertionError("epoch size and chunks disagree")  # pragma: no cover

    def __eq__(self, other: object) -> bool:
        if isinstance(other, EpochRecords | list):
            return len(self) == len(other) and all(map(eq, self, other))
        return NotImplemented  # (defining __eq__ makes it unhashable, like a list)

    def __repr__(self) -> str:
        return f"EpochRecords({list(self)!r})"
