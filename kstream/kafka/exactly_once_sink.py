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
neither lost nor doubled. Each sink task has a fixed
``transactional.id = f"{app}.sink.{task}"``; ``init_transactions`` fences an older
producer with that id, so a zombie task can never commit.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NoReturn

from kstream.config import Guarantee
from kstream.kafka.clients import (
    KafkaException,
    init_transactions,
    is_fenced,
    kafka_error,
    make_producer,
)
from kstream.kafka.commits import CommitMarker, marker_partition, read_latest_marker
from kstream.kafka.sink import Sink, SinkFencedError, produce_chunks
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

__all__ = ["ExactlyOnceSink", "SinkCommit"]

log = logging.getLogger(__name__)


class SinkCommit:
    """One exactly-once sink's transaction for a completed checkpoint, opened and filled
    (``ExactlyOnceSink.begin_commit``): ``publish`` commits it (any thread; SinkFencedError
    or SinkError), then ``published`` drops its epochs from the buffer (the sink's own
    thread) and returns how many records it published. Until then a snapshot still holds
    them: a restore from it reads the marker and does not publish them again."""

    __slots__ = ("checkpoint_id", "count", "epochs", "sink")

    def __init__(
        self, sink: ExactlyOnceSink, epochs: list[Epoch], checkpoint_id: int, count: int
    ) -> None:
        self.sink = sink
        self.epochs = epochs
        self.checkpoint_id = checkpoint_id
        self.count = count

    def publish(self) -> None:
        self.sink._commit(self.checkpoint_id)

    def run(self) -> int:
        """``publish`` and ``published`` here and now."""
        self.publish()
        return self.published()

    def published(self) -> int:
        sink, n = self.sink, self.count
        sink.buffer.committed(self.epochs, self.checkpoint_id)
        sink.published += n
        log.debug("sink %s committed checkpoint %d: %d records", sink.task, self.checkpoint_id, n)
        return n


class ExactlyOnceSink(Sink):
    """Exactly-once sink task: write-ahead buffer in the snapshot, one transaction per commit.

    Call ``recover(blob, attempt)`` before anything is committed (``blob=None`` on
    a first start); it fences older producers of this task.

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
    ) -> None:
        self.app = app
        self.task = task
        self.bootstrap = bootstrap
        self.transactional_id = sink_transactional_id(app, task)
        self.commits_topic = commits_topic(app)
        self.timeout = timeout
        self._client_config = dict(producer_config or {})  # the user's settings
        self._producer_config = {"linger.ms": 20, **self._client_config}
        self._producer: Any = None
        self._marker_parts: int | None = None
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
        """Publish epochs ≤ ``checkpoint_id`` with a marker in one transaction.

        Idempotent: a completion at or below the last committed one is a no-op, a
        later one subsumes earlier ones. Epochs that are all empty are marked
        committed without a transaction. Raises SinkFencedError when a newer
        producer owns this task, SinkError when the transaction failed (the
        epochs stay sealed; a later completion or a restore commits them).
        """
        commit = self.begin_commit(checkpoint_id)
        return 0 if commit is None else commit.run()

    def begin_commit(self, checkpoint_id: int) -> SinkCommit | None:
        """``on_checkpoint_completed`` up to the commit round trip: the transaction
        opened and filled (output and marker). Returns the commit, or None when nothing
        is left to commit. Its ``publish`` (the round trip) may run on another thread
        while this sink's producer is not used otherwise; its ``published`` (the epochs
        dropped from the buffer) runs on the thread that owns the sink, before the next
        ``begin_commit``: a worker goes on processing while its tasks' transactions
        commit (``kstream.worker.sinkcommit``)."""
        if self._producer is None or self.attempt is None:
            raise SinkStateError(f"sink {self.task}: recover() must run before committing")
        if self.buffer.last_committed is not None and checkpoint_id <= self.buffer.last_committed:
            return None
        due = self.buffer.due(checkpoint_id)
        if not due:
            return None
        if not any(e.size for e in due):
            self.buffer.committed(due, max(e.checkpoint_id or 0 for e in due))
            return None
        count = self._begin(due, checkpoint_id)
        return SinkCommit(self, due, checkpoint_id, count)

    def _begin(self, epochs: list[Epoch], checkpoint_id: int) -> int:
        marker = CommitMarker(self.task, checkpoint_id, self.attempt or 0)
        p = self._producer
        parts = self._marker_partitions()
        opened = False
        try:
            # 1. Open the transaction: everything until commit is invisible to
            #    read_committed readers, and aborted if this process dies.
            p.begin_transaction()
            opened = True
            # 2. The buffered output, in epoch and write order.
            #    Spilled segments are read back and decoded one at a time.
            produce_chunks(p, (c for e in epochs for c in e.iter_chunks()))
            # 3. The marker in the SAME transaction: output and marker become
            #    visible together or not at all — that is what recovery reads.
            p.produce(
                self.commits_topic,
                marker.encode(),
                self.task.encode(),
                partition=marker_partition(self.task, parts),
            )
        except KafkaException as e:
            self._fail(e, f"committing checkpoint {checkpoint_id}", opened=opened)
        return sum(e.size for e in epochs)

    def _commit(self, checkpoint_id: int) -> None:
        try:
            # 4. Commit (flushes first). Only then may the epochs be dropped.
            self._producer.commit_transaction(self.timeout)
        except KafkaException as e:
            self._fail(e, f"committing checkpoint {checkpoint_id}")

    def _fail(self, e: KafkaException, what: str, *, opened: bool = False) -> NoReturn:
        """Turn a transaction error into SinkFencedError / SinkError, aborting when allowed:
        when the error requires it, or (``opened``) when a transaction was open and never
        committed (a record refused as it was produced: otherwise the open transaction
        holds read_committed readers back until it times out)."""
        err = kafka_error(e)
        if is_fenced(e):
            raise SinkFencedError(
                f"sink {self.task} ({self.transactional_id}) fenced while {what}: a newer "
                f"instance of this task owns the transactional id; stop this task"
            ) from e
        if err is not None and (err.txn_requires_abort() or (opened and not err.fatal())):
            try:
                self._producer.abort_transaction(self.timeout)
            except KafkaException as abort_err:
                if is_fenced(abort_err):
                    raise SinkFencedError(
                        f"sink {self.task} ({self.transactional_id}) fenced while aborting"
                    ) from abort_err
                raise SinkError(
                    f"sink {self.task}: abort after failed {what} also failed: {abort_err}"
                ) from abort_err
        raise SinkError(
            f"sink {self.task}: {what} failed ({err}); buffered epochs are kept and "
            f"published by a later completion or after a restore"
        ) from e

    def _marker_partitions(self) -> int:
        """The commit-marker topic's partition count, asked once per producer (a commit
        must not wait for a metadata request; the count is fixed, as ``recover`` reads
        the marker where ``marker_partition`` put it)."""
        if self._marker_parts is None:
            self._marker_parts = self._ask_marker_partitions()
        return self._marker_parts

    def _ask_marker_partitions(self) -> int:
        md = self._producer.list_topics(self.commits_topic, timeout=self.timeout)
        t = md.topics.get(self.commits_topic)
        if t is None or t.error is not None or not t.partitions:
            raise SinkError(
                f"commit-marker topic {self.commits_topic} does not exist; create it "
                f"(compacted) before running exactly-once sinks"
            )
        return len(t.partitions)

    # ---- recovery

    def recover(self, blob: bytes | None, attempt: int) -> int:
        """(Re)start in ``attempt`` from a snapshot's ``blob`` (``None``: nothing buffered).

        Returns the number of records published now (epochs of the blob whose
        marker was missing). Raises SinkFencedError if a newer instance exists.
        """
        buffer = self._new_buffer(blob)  # validate before touching Kafka
        self.close()
        self.attempt = attempt
        self._marker_parts = None
        self._producer = make_producer(
            self.bootstrap,
            transactional_id=self.transactional_id,
            extra=self._producer_config,
        )
        # 1. Fence: init_transactions bumps the producer epoch of this fixed
        #    transactional id and aborts whatever transaction an older instance
        #    (a zombie, or our own killed predecessor) left open. From here on no
        #    older instance can commit, so the marker read next cannot change
        #    behind our back.
        t0 = time.perf_counter()
        try:
            init_transactions(self._producer, self.timeout)
        except KafkaException as e:
            self._fail(e, "fencing (init_transactions)")
        log.debug("sink %s fenced in %.0f ms", self.task, (time.perf_counter() - t0) * 1000)
        # 2. Read our latest marker with read_committed to the end offsets: it
        #    says which checkpoint's output is already published. init_transactions
        #    returns only once an older instance's transaction is completed (the
        #    coordinator answers CONCURRENT_TRANSACTIONS until its markers are
        #    written), so a commit that raced our start is visible here.
        marker = self.marker = self.read_marker()
        # 3. Epochs at or below the marker were published in the transaction that
        #    wrote it: drop them (publishing again would duplicate).
        self.buffer = buffer
        dropped = 0
        if marker is not None:
            dropped = buffer.drop_through(marker.checkpoint)
        # 4. The remaining sealed epochs belong to a completed checkpoint (we were
        #    restored from it) whose transaction never committed: publish now.
        published = 0
        if buffer.sealed:
            last = buffer.sealed[-1].checkpoint_id
            assert last is not None
            published = self.on_checkpoint_completed(last)
        log.info(
            "sink %s recovered in attempt %d: marker=%s, dropped %d published records, "
            "published %d buffered records",
            self.task,
            attempt,
            marker.checkpoint if marker else None,
            dropped,
            published,
        )
        return published

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
                self._marker_partitions(),
                self.timeout,
                self._client_config,
            )
        except KafkaException as e:
            raise SinkError(f"sink {self.task}: reading its commit marker failed: {e}") from e

    def close(self) -> None:
        """Drop the producer and the buffer's spill files; an open transaction is aborted
        by the broker (or by the next fence). What the buffer held is in the snapshot."""
        self.buffer.close()
        if self._producer is not None:
            self._producer.flush(0)
            self._producer = None
