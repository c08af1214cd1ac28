"""The exactly-once Kafka sink (docs/design.md §7); the :class:`Sink` interface is in
:mod:`kstream.kafka.sink`.

**ExactlyOnceSink.** Output of epoch *n* (records written after barrier *n-1* and
before barrier *n*) is held in memory — past the sink's memory budget, spilled to
its spill directory on local disk (:mod:`kstream.sinkbuffer.spill`) — sealed at
barrier *n* and kept in the snapshot of checkpoint *n*. Only when checkpoint *n* is complete is it produced,
together with a commit marker ``(task, n)`` on the compacted ``<app>.commits``
topic (:mod:`kstream.kafka.commits`), in ONE Kafka transaction. A crash before the commit leaves nothing
visible to ``read_committed`` readers and the buffer is in the snapshot; a crash
after it leaves a marker that says the buffer is already out. So output is
neither lost nor doubled.

A worker's sink tasks share its one transactional producer, and a completion is one
transaction for all of them, fenced by the worker's group membership
(:mod:`kstream.kafka.worker_transactions`, docs/design.md §7.1). A sink used on its
own has a producer of its own with the fixed ``transactional.id =
f"{app}.sink.{task}"``; ``init_transactions`` fences an older producer with that id.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from kstream.config import Guarantee
from kstream.kafka.clients import KafkaException
from kstream.kafka.commits import CommitMarker, read_latest_marker
from kstream.kafka.sink import Sink
from kstream.kafka.worker_transactions import (
    Publication,
    SinkCommit,
    WorkerTransactions,
    committing,
)
from kstream.names import commits_topic, sink_transactional_id
from kstream.sinkbuffer.budget import MemoryBudget
from kstream.sinkbuffer.buffer import EpochBuffer
from kstream.sinkbuffer.epochs import (
    ColumnBatch,
    Epoch,
    OutputRecord,
    SinkError,
    SinkStateError,
)
from kstream.sinkbuffer.spill import DEFAULT_MEMORY_BUDGET, SegmentedBlob, SpillDir

__all__ = ["NOT_READ", "ExactlyOnceSink", "NotRead", "Publication", "SinkCommit"]

log = logging.getLogger(__name__)


class NotRead:
    """A commit marker not read yet (None is "read: there is none")."""


NOT_READ = NotRead()


class ExactlyOnceSink(Sink):
    """Exactly-once sink task: write-ahead buffer in the snapshot, published in a
    transaction once its checkpoint completed.

    Call ``recover(blob, attempt)`` before anything is committed (``blob=None`` on
    a first start).

    ``transactions``: the worker's (shared by its sink tasks; ``inputs``: the task's
    input partitions, whose group offsets ``wait_stable`` fetches before the marker is
    read — a previous owner's publication in flight is waited for). None: a producer of
    this task's own, fenced by its fixed id at every ``recover``.

    ``spill_dir``: where the buffer spills past ``memory_budget`` (bytes of its own, or
    a :class:`MemoryBudget` the worker's sink tasks share; in the task's state
    directory); ``None`` keeps everything in memory.
    """

    guarantee = Guarantee.EXACTLY_ONCE

    def __init__(
        self,
        app: str,
        task: str,
        bootstrap: str,
        *,
        producer_config: Mapping[str, Any] | None = None,
        timeout: float = 30.0,
        spill_dir: Path | None = None,
        memory_budget: int | MemoryBudget = DEFAULT_MEMORY_BUDGET,
        transactions: WorkerTransactions | None = None,
        inputs: Mapping[tuple[str, int], int] | None = None,
        wait_stable: Callable[[], None] | None = None,
        marker: CommitMarker | NotRead | None = NOT_READ,
    ) -> None:
        self.app = app
        self.task = task
        self.bootstrap = bootstrap
        self.commits_topic = commits_topic(app)
        self.timeout = timeout
        self._client_config = dict(producer_config or {})  # the user's settings
        self._own = transactions is None
        self.transactions = transactions or WorkerTransactions(
            bootstrap,
            sink_transactional_id(app, task),
            self.commits_topic,
            producer_config=self._client_config,
            timeout=timeout,
        )
        self.transactional_id = self.transactions.transactional_id
        self.inputs = dict(inputs or {})
        self._wait_stable = wait_stable
        self._read = marker  # read by the worker for all its tasks (NOT_READ: read here)
        self.attempt: int | None = None
        # The latest commit marker read at the last recover: what is already published.
        self.marker: CommitMarker | None = None
        self.spill_dir = spill_dir
        self.memory_budget = memory_budget
        self.buffer = self._new_buffer(None)
        self.published = 0  # records published by this instance (monitoring)

    def _new_buffer(self, blob: bytes | None) -> EpochBuffer:
        """A buffer of the snapshot's ``blob`` (BlobFormatError if it is not valid),
        spilling to a directory of its own under ``spill_dir``."""
        if self.spill_dir is None:
            return EpochBuffer.from_blob(blob)
        return EpochBuffer.from_blob(blob, SpillDir(self.spill_dir), self.memory_budget)

    # ---- writing

    def write(self, record: OutputRecord) -> None:
        self.buffer.append(record)

    def write_batch(self, records: Iterable[OutputRecord]) -> None:
        self.buffer.extend(records)

    def write_columns(
        self,
        topic: str,
        keys: list[bytes | None],
        values: list[bytes | None],
        timestamps: list[int],
    ) -> None:
        """Buffer the lists themselves (no copy): the caller must not change them afterwards."""
        self.buffer.append_columns(ColumnBatch(topic, keys, values, timestamps))

    def on_barrier(self, checkpoint_id: int) -> None:
        """Seal the open epoch as epoch ``checkpoint_id`` (it goes into the snapshot)."""
        self.buffer.seal(checkpoint_id)

    def buffer_blob(self) -> bytes:
        """Sealed, uncommitted epochs; call after ``on_barrier(n)`` for checkpoint *n*'s snapshot."""
        return self.buffer.blob()

    def snapshot_blob(self) -> bytes | SegmentedBlob:
        """``buffer_blob``; once the buffer spilled, a blob the upload thread writes from
        the spill files (what the worker's snapshot takes)."""
        return self.buffer.snapshot_blob()

    # ---- committing

    def on_checkpoint_completed(self, checkpoint_id: int) -> int:
        """Publish epochs ≤ ``checkpoint_id`` with a marker in one transaction, now.

        Idempotent: a completion at or below the last committed one is a no-op, a
        later one subsumes earlier ones. Epochs that are all empty are marked
        committed without a transaction. Raises SinkFencedError when this task has a
        newer owner, SinkError when the transaction failed (the epochs stay sealed; a
        later completion or a restore commits them).
        """
        commit = self.due(checkpoint_id)
        if commit is None:
            return 0
        return self.transactions.run([commit], self.inputs, committing([commit]))

    def begin_commit(self, checkpoint_id: int) -> Publication | None:
        """``on_checkpoint_completed`` up to the commit round trip: this task's
        transaction opened and filled (None: nothing to publish)."""
        commit = self.due(checkpoint_id)
        if commit is None:
            return None
        return self.transactions.open([commit], self.inputs, committing([commit]))

    def due(self, checkpoint_id: int) -> SinkCommit | None:
        """This task's part of the publication of ``checkpoint_id`` (no Kafka call): the
        sealed epochs up to it and the marker; None when nothing is left to publish.
        Once its transaction committed, its ``published`` drops the epochs (on this
        sink's thread, before the next ``due``): a worker goes on processing while the
        transaction commits (``kstream.worker.sinkcommit``)."""
        if self.attempt is None:
            raise SinkStateError(f"sink {self.task}: recover() must run before committing")
        if self.buffer.last_committed is not None and checkpoint_id <= self.buffer.last_committed:
            return None
        due = self.buffer.due(checkpoint_id)
        if not due:
            return None
        if not any(e.size for e in due):
            self.buffer.committed(due, max(e.checkpoint_id or 0 for e in due))
            return None
        marker = CommitMarker(self.task, checkpoint_id, self.attempt or 0)
        return SinkCommit(self.task, marker, due, sum(e.size for e in due), self._published)

    def _published(self, epochs: list[Epoch], checkpoint_id: int) -> None:
        self.buffer.committed(epochs, checkpoint_id)
        self.published += sum(e.size for e in epochs)
        log.debug("sink %s committed checkpoint %d", self.task, checkpoint_id)

    # ---- recovery

    def recover(
        self,
        blob: bytes | None,
        attempt: int,
        *,
        keep: bool = False,
        marker: CommitMarker | NotRead | None = NOT_READ,
    ) -> int:
        """(Re)start in ``attempt`` from a snapshot's ``blob`` (``None``: nothing buffered).

        ``keep``: the buffer is the snapshot's already (a task that held after it: a
        hand-over, docs/design.md §6.6), kept instead of ``blob``; ``marker``: the one
        the worker read for it (else its own was passed in, or it reads it here).

        Returns the number of records published now: the blob's epochs whose marker is
        missing, published here by a sink with a producer of its own; a worker's sink
        leaves them sealed for the worker's one publication after the restore
        (``pending``). Raises SinkFencedError if a newer instance exists.
        """
        if not isinstance(marker, NotRead):
            self._read = marker
        buffer = self.buffer if keep else self._new_buffer(blob)  # validate before Kafka
        if not keep:
            self.buffer.close()
        self.attempt = attempt
        t0 = time.perf_counter()
        if not isinstance(self._read, NotRead):
            pass  # the worker waited for stable offsets and read the markers of all its tasks
        elif self._own:
            # 1. Fence: init_transactions bumps the producer epoch of this fixed
            #    transactional id and aborts whatever transaction an older instance
            #    (a zombie, or our own killed predecessor) left open. From here on no
            #    older instance can commit, so the marker read next cannot change
            #    behind our back. init_transactions returns only once an older
            #    instance's transaction is completed, so a commit that raced our start
            #    is visible to the marker read.
            self.transactions.fence()
        elif self._wait_stable is not None:
            # 1'. A worker's sink: the previous owner's publication of this task, if one
            #    is in flight, holds offsets of this task's inputs; the read_committed
            #    offset fetch is answered only once it committed or aborted.
            self._wait_stable()
        log.debug("sink %s fenced in %.0f ms", self.task, (time.perf_counter() - t0) * 1000)
        # 2. Read our latest marker with read_committed to the end offsets: it says
        #    which checkpoint's output is already published.
        marker = self.marker = self.read_marker() if isinstance(self._read, NotRead) else self._read
        self._read = NOT_READ  # good for one recover: a later one reads again
        # 3. Epochs at or below the marker were published in the transaction that
        #    wrote it: drop them (publishing again would duplicate).
        self.buffer = buffer
        dropped = 0
        if marker is not None:
            dropped = buffer.drop_through(marker.checkpoint)
        # 4. The remaining sealed epochs belong to a completed checkpoint (we were
        #    restored from it) whose transaction never committed: publish them.
        published = 0
        if buffer.sealed and self._own:
            last = buffer.sealed[-1].checkpoint_id
            assert last is not None
            published = self.on_checkpoint_completed(last)
        log.info(
            "sink %s recovered in attempt %d: marker=%s, dropped %d published records, "
            "published %d buffered records, %d left for the worker's publication",
            self.task,
            attempt,
            marker.checkpoint if marker else None,
            dropped,
            published,
            sum(e.size for e in buffer.sealed) if not self._own else 0,
        )
        return published

    @property
    def pending(self) -> int | None:
        """The last checkpoint whose sealed epochs wait for a publication (after a
        restore: what the marker did not cover), None when none."""
        if not self.buffer.sealed:
            return None
        return self.buffer.sealed[-1].checkpoint_id

    def read_marker(self) -> CommitMarker | None:
        """This task's latest committed marker, read to the end of its partition; a read
        the cluster fails is this sink's failure (SinkError: the task fails, the
        restore is tried again), never the worker's."""
        try:
            return read_latest_marker(
                self.bootstrap,
                self.app,
                self.task,
                self.commits_topic,
                self.transactions.marker_partitions(),
                self.timeout,
                self._client_config,
            )
        except KafkaException as e:
            raise SinkError(f"sink {self.task}: reading its commit marker failed: {e}") from e

    def close(self) -> None:
        """Drop the buffer's spill files, and a producer of this task's own; an open
        transaction is aborted by the broker (or by the next fence). What the buffer
        held is in the snapshot."""
        self.buffer.close()
        if self._own:
            self.transactions.close()
