"""The exactly-once sink's write-ahead buffer (DESIGN §7): the open epoch and the sealed
epochs kept until their checkpoint is committed.

Pure: no I/O. :mod:`kstream.kafka.sink` publishes what this holds.
"""

from __future__ import annotations

from collections.abc import Iterable

from kstream.sinkbuffer.blob import decode_blob, encode_blob
from kstream.sinkbuffer.epochs import (
    ColumnBatch,
    Epoch,
    OutputRecord,
    SinkStateError,
)


class EpochBuffer:
    """The write-ahead buffer of one exactly-once sink task: pure, no I/O.

    Holds one open epoch and the sealed epochs not yet committed, in checkpoint
    order. Barrier ids must increase; checkpoints that were aborted leave their
    sealed epochs here until a later completion subsumes them.
    """

    def __init__(self) -> None:
        self.open = Epoch()
        self.sealed: list[Epoch] = []
        self.last_sealed: int | None = None
        self.last_committed: int | None = None

    def append(self, record: OutputRecord) -> None:
        self.open.append(record)

    def extend(self, records: Iterable[OutputRecord]) -> None:
        self.open.extend(records)

    def append_columns(self, batch: ColumnBatch) -> None:
        self.open.append_columns(batch)

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
        self.sealed = [e for e in self.sealed if id(e) not in done]
        if self.last_committed is None or checkpoint_id > self.last_committed:
            self.last_committed = checkpoint_id

    def drop_through(self, checkpoint_id: int) -> int:
        """Forget sealed epochs ≤ ``checkpoint_id`` (already published, says a marker)."""
        before = sum(e.size for e in self.sealed)
        self.sealed = [
            e
            for e in self.sealed
            if e.checkpoint_id is not None and e.checkpoint_id > checkpoint_id
        ]
        if self.last_committed is None or checkpoint_id > self.last_committed:
            self.last_committed = checkpoint_id
        return before - sum(e.size for e in self.sealed)

    def blob(self) -> bytes:
        """Every sealed, uncommitted epoch in the blob format (:func:`encode_blob`)."""
        return encode_blob(self.sealed)

    @classmethod
    def from_blob(cls, blob: bytes | None) -> EpochBuffer:
        """A buffer holding the sealed epochs of ``blob`` and an empty open epoch."""
        buf = cls()
        if blob:
            buf.sealed = decode_blob(blob)
            if buf.sealed:
                buf.last_sealed = buf.sealed[-1].checkpoint_id
        return buf
