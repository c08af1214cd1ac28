"""One transactional producer for all of a worker's exactly-once sinks (docs/design.md §7.1).

A producer per sink task cost its librdkafka threads and sockets per task (about 8
threads and 14 descriptors: hundreds of tasks were thousands of threads). A worker
now publishes a completed checkpoint of all its tasks in ONE transaction of one
producer: each task's buffered epochs and its commit marker
(:mod:`kstream.kafka.commits`), and the tasks' input positions as the group's offsets
with the worker's consumer-group metadata (``send_offsets_to_transaction``).

**Fencing by group membership** (Kafka Streams' exactly-once v2, KIP-447). A task is
its input partitions, which the group assigns; a worker that lost a task left the group
or holds an older generation, and the broker refuses its offsets
(``UNKNOWN_MEMBER_ID``/``ILLEGAL_GENERATION``): its transaction cannot commit. A task's
new owner fetches the group's offsets of the task's inputs ``read_committed`` before it
reads the task's marker; librdkafka asks with *require stable*, which the broker does not
answer while a transaction holding those offsets is open. So the marker it then reads
says whether the old owner's last publication committed.
``integration/test_eos_fencing_contract.py`` pins both on the real broker.

A sink used on its own (``ExactlyOnceSink(app, task, bootstrap)``) has a
``WorkerTransactions`` of its own with the task's fixed id, fenced by
``init_transactions`` as before.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NoReturn

from kstream.kafka.clients import (
    KafkaError,
    KafkaException,
    TopicPartition,
    init_transactions,
    is_fenced,
    kafka_error,
    make_producer,
)
from kstream.kafka.commits import CommitMarker, marker_partition
from kstream.kafka.sink import SinkFencedError, SinkGroupFencedError, produce_chunks
from kstream.sinkbuffer.epochs import Epoch, SinkError

__all__ = ["Publication", "SinkCommit", "WorkerTransactions", "committing"]

log = logging.getLogger(__name__)

TP = tuple[str, int]

ANSWER_GRACE_S = 5.0
"""How much longer than its own timeout a transactional call is waited for."""

#: The group's refusals of a worker's offsets: it no longer owns those partitions.
_GROUP_FENCED = frozenset(
    {
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError.ILLEGAL_GENERATION,
        KafkaError.FENCED_INSTANCE_ID,
    }
)


class SinkCommit:
    """One sink task's part of a publication: its due epochs up to ``checkpoint_id`` and
    its marker. ``published`` (on the sink's thread, once the transaction committed)
    drops the epochs from the sink's buffer and returns how many records went out."""

    __slots__ = ("_done", "checkpoint_id", "count", "epochs", "marker", "task")

    def __init__(
        self,
        task: str,
        marker: CommitMarker,
        epochs: list[Epoch],
        count: int,
        done: Callable[[list[Epoch], int], None],
    ) -> None:
        self.task = task
        self.marker = marker
        self.epochs = epochs
        self.checkpoint_id = marker.checkpoint
        self.count = count
        self._done = done

    def published(self) -> int:
        self._done(self.epochs, self.checkpoint_id)
        return self.count


class Publication:
    """An open transaction carrying ``commits``: ``publish`` commits it (any thread;
    SinkFencedError or SinkError), then ``published`` drops their epochs (the sinks'
    thread). Until then their snapshots hold the epochs; a restore reads the markers."""

    __slots__ = ("_metadata", "_offsets", "_owner", "commits", "what")

    def __init__(
        self,
        owner: WorkerTransactions,
        commits: list[SinkCommit],
        what: str,
        offsets: Mapping[TP, int] | None = None,
        metadata: Any = None,
    ) -> None:
        self._owner = owner
        self.commits = commits
        self.what = what
        self._offsets = offsets
        self._metadata = metadata

    @property
    def tasks(self) -> list[str]:
        return [c.task for c in self.commits]

    def publish(self) -> None:
        """Add the offsets (a round trip to the group coordinator) and commit (a flush
        and a round trip to the transaction coordinator): the slow part, for a thread
        that is not the processing loop's."""
        self._owner.commit(self.what, self._offsets, self._metadata)

    def published(self) -> int:
        return sum(c.published() for c in self.commits)

    def run(self) -> int:
        """``publish`` and ``published`` here and now."""
        self.publish()
        return self.published()


class WorkerTransactions:
    """The transactional producer of a worker's exactly-once sinks.

    ``group_metadata``: the worker's consumer-group metadata, read when a transaction
    adds offsets (None: no offsets are added; fencing is by ``transactional_id`` alone,
    as for a sink used on its own). One transaction at a time: ``run`` holds a lock
    (restores publish from several threads); ``open`` + ``commit`` are the worker's
    completion path, on one thread at a time (its commits are collected before a
    restore)."""

    def __init__(
        self,
        bootstrap: str,
        transactional_id: str,
        commits_topic: str,
        *,
        producer_config: Mapping[str, Any] | None = None,
        group_metadata: Callable[[], Any] | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.bootstrap = bootstrap
        self.transactional_id = transactional_id
        self.commits_topic = commits_topic
        self.timeout = timeout
        self._config = {"linger.ms": 20, **(producer_config or {})}
        self._group_metadata = group_metadata
        self._producer: Any = None
        self._marker_parts: int | None = None
        self._lock = threading.RLock()

    # ---- the producer

    def producer(self) -> Any:
        """The producer, made and initialised (``init_transactions``) on first use."""
        with self._lock:
            if self._producer is None:
                self.fence()
            return self._producer

    def fence(self) -> None:
        """A new producer for this id, initialised: fences any older instance of it and
        aborts what it left open (SinkFencedError if a newer one took the id)."""
        with self._lock:
            self.close()
            self._marker_parts = None
            self._producer = make_producer(
                self.bootstrap, transactional_id=self.transactional_id, extra=self._config
            )
            try:
                init_transactions(self._producer, self.timeout)
            except KafkaException as e:
                self._fail(e, "fencing (init_transactions)")

    def marker_partitions(self) -> int:
        """The commit-marker topic's partition count, asked once per producer."""
        with self._lock:
            if self._marker_parts is None:
                md = self.producer().list_topics(self.commits_topic, timeout=self.timeout)
                t = md.topics.get(self.commits_topic)
                if t is None or t.error is not None or not t.partitions:
                    raise SinkError(
                        f"commit-marker topic {self.commits_topic} does not exist; create it "
                        f"(compacted) before running exactly-once sinks"
                    )
                self._marker_parts = len(t.partitions)
            return self._marker_parts

    # ---- transactions

    def run(self, commits: list[SinkCommit], offsets: Mapping[TP, int], what: str) -> int:
        """Open, fill and commit one transaction now, on this thread; returns the
        records published."""
        with self._lock:
            return self.open(commits, offsets, what).run()

    def open(self, commits: list[SinkCommit], offsets: Mapping[TP, int], what: str) -> Publication:
        """Open a transaction with ``commits`` (output, then the marker, per task); its
        ``publish`` adds ``offsets`` as the group's with the group metadata read now:
        the transaction fails if the group no longer counts this worker as the owner
        of those partitions. Nothing here waits on a coordinator: a broker that moves
        or restarts holds up the publishing thread, never the caller's."""
        p = self.producer()
        parts = self.marker_partitions()
        metadata = None
        if offsets and self._group_metadata is not None:
            metadata = self._group_metadata()
            if metadata is None:
                raise SinkFencedError(
                    f"{what}: this worker holds no assignment of the group; the new owner "
                    f"of its tasks' inputs publishes them"
                )
        opened = False
        try:
            # Everything until the commit is invisible to read_committed readers, and
            # aborted if this process dies.
            p.begin_transaction()
            opened = True
            for c in commits:
                produce_chunks(p, (chunk for e in c.epochs for chunk in e.iter_chunks()))
                # The marker in the SAME transaction: output and marker become visible
                # together or not at all; that is what recovery reads.
                p.produce(
                    self.commits_topic,
                    c.marker.encode(),
                    c.task.encode(),
                    partition=marker_partition(c.task, parts),
                )
        except KafkaException as e:
            self._fail(e, what, opened=opened)
        return Publication(self, commits, what, offsets if metadata is not None else None, metadata)

    def commit(
        self, what: str, offsets: Mapping[TP, int] | None = None, metadata: Any = None
    ) -> None:
        """Add ``offsets`` with ``metadata`` (when given), then commit."""
        p = self.producer()
        if offsets and metadata is not None:
            try:
                self._answered(
                    p, lambda: p.send_offsets_to_transaction(
                        topic_partitions(offsets), metadata, self.timeout
                    ), what,
                )  # fmt: skip
            except KafkaException as e:
                self._fail(e, what, opened=True)
        try:
            self._answered(p, lambda: p.commit_transaction(self.timeout), what)  # flushes first
        except KafkaException as e:
            self._fail(e, what)

    def _answered(self, producer: Any, call: Callable[[], None], what: str) -> None:
        """``call`` (a transactional call of ``producer`` given ``self.timeout``), waited
        for at most ``timeout + ANSWER_GRACE_S``. librdkafka's
        ``send_offsets_to_transaction`` does not honour its timeout and can wait for good
        when the group coordinator's broker restarts (confluentinc/librdkafka#5456,
        #5511; a worker hung so in the rolling restart of every broker). Past that
        bound the producer is given up: SinkError (the tasks fail and the job restores),
        and the next use makes a new instance of the transactional id, whose
        ``init_transactions`` fences the stuck one and aborts its transaction. The
        stuck call keeps its thread until the client answers."""
        done = threading.Event()
        raised: list[BaseException] = []

        def run() -> None:
            try:
                call()
            except BaseException as e:  # handed to the waiting thread
                raised.append(e)
            finally:
                done.set()

        threading.Thread(target=run, name="kstream-txn-call", daemon=True).start()
        bound = self.timeout + ANSWER_GRACE_S
        if not done.wait(bound):
            with self._lock:
                if self._producer is producer:
                    self._producer = None
            raise SinkError(
                f"{what}: the Kafka client did not answer within {bound:.0f} s (a coordinator "
                f"moving); a new producer instance takes over; buffered epochs are kept and "
                f"published after the restore"
            )
        if raised:
            raise raised[0]

    def _fail(self, e: KafkaException, what: str, *, opened: bool = False) -> NoReturn:
        """Turn a transaction error into SinkFencedError / SinkError, aborting when
        allowed: when the error requires it, or (``opened``) when a transaction was
        open and never committed (it would hold read_committed readers back until it
        timed out)."""
        err = kafka_error(e)
        if is_fenced(e):
            self._producer = None  # a newer producer has the id: this one is done
            raise SinkFencedError(
                f"{self.transactional_id} fenced while {what}: a newer instance owns the "
                f"transactional id; stop its tasks"
            ) from e
        group_fenced = err is not None and err.code() in _GROUP_FENCED
        if err is not None and (err.txn_requires_abort() or (opened and not err.fatal())):
            self._abort(what)
        if err is not None and err.fatal():
            self._producer = None  # unusable: the next use makes a new one
        if group_fenced and err is not None:
            raise SinkGroupFencedError(
                f"{what}: the group no longer counts this worker as the owner of its tasks' "
                f"inputs ({err.name()}: {err.str()}); their new owner publishes them"
            ) from e
        raise SinkError(
            f"{what} failed ({err}); buffered epochs are kept and published by a later "
            f"completion or after a restore"
        ) from e

    def _abort(self, what: str) -> None:
        try:
            self._producer.abort_transaction(self.timeout)
        except KafkaException as abort_err:
            if is_fenced(abort_err):
                self._producer = None
                raise SinkFencedError(
                    f"{self.transactional_id} fenced while aborting"
                ) from abort_err
            raise SinkError(f"abort after failed {what} also failed: {abort_err}") from abort_err

    def close(self) -> None:
        """Drop the producer; an open transaction is aborted by the broker (or by the
        next fence)."""
        with self._lock:
            if self._producer is not None:
                self._producer.flush(0)
                self._producer = None


def committing(commits: list[SinkCommit]) -> str:
    """What a publication of ``commits`` is, for its errors: "sink a, b: committing
    checkpoint 4" (past five tasks, how many more)."""
    tasks = [c.task for c in commits]
    named = ", ".join(tasks[:5]) + (f" and {len(tasks) - 5} more" if len(tasks) > 5 else "")
    n = max((c.checkpoint_id for c in commits), default=0)
    return f"sink {named}: committing checkpoint {n}"


def topic_partitions(offsets: Mapping[TP, int]) -> list[Any]:
    return [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]


def committable_offsets(positions: Iterable[tuple[TP, Any]]) -> dict[TP, int]:
    """A task's input positions as offsets the group can hold: a source partition's next
    offset, an internal partition's lowest upstream position (where a restore would
    seek), 0 where nothing was read. Their value is for monitoring; what fences is that
    the transaction holds offsets of exactly the task's partitions."""
    out: dict[TP, int] = {}
    for tp, pos in positions:
        if isinstance(pos, int):
            out[tp] = pos
        elif pos:
            out[tp] = min(int(v) for v in pos.values())
        else:
            out[tp] = 0
    return out
