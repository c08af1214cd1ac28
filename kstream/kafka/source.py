"""Source consumer of a worker: batched reads, positions, lag and the group's offsets; its
consumer-group membership is its base class (:mod:`kstream.kafka.groupmember`).

**Assignor: eager ``range``.** Co-partitioned inputs of a join must land on the
same worker (docs/design.md §2). The range assignor assigns each topic separately but
in the same way: members sorted by member id, partitions split into contiguous
ranges in that order. With every member subscribed to the same topics and the
topics having identical partition counts, partition *i* of every topic goes to
the same member (proved on a real broker by
``integration/test_source_consumer.py``). ``cooperative-sticky`` gives no such
guarantee (it balances all partitions together): only a job whose tasks read one topic
and exchange nothing may use it, to keep its partitions through a rebalance (§6.8).
Mismatched partition counts must be rejected at start-up by the planner
(:func:`check_copartitioned` helps).

Records come back grouped by topic-partition as plain tuples
``(key, value, timestamp_ms, offset, headers)`` so the worker's per-record path is
a tuple unpack, not a method call per field.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from confluent_kafka import (
    OFFSET_INVALID,
    TIMESTAMP_NOT_AVAILABLE,
    TopicPartition,
)

from kstream.kafka.clients import (
    KafkaError,
    KafkaException,
    consume_available,
    make_consumer,
    watermark_offsets,
)
from kstream.kafka.groupmember import (
    TP,
    AssignCallback,
    GroupMember,
    RevokeCallback,
    SourceError,
)
from kstream.kafka.missingtopics import MISSING_TOPIC_GRACE_S, MissingTopics
from kstream.kafka.reachability import Reachability
from kstream.names import worker_client_id

__all__ = [
    "TP",
    "RawRecord",
    "SourceConsumer",
    "SourceError",
    "check_copartitioned",
]

log = logging.getLogger(__name__)

RawRecord = tuple[
    bytes | None, bytes | None, int | None, int, list[tuple[str, bytes | None]] | None
]
"""(key, value, timestamp ms or None, offset, headers or None)."""

FETCH_BYTES_PER_PARTITION = 8 * 1024 * 1024
FETCH_QUEUE_BACKOFF_MS = 20
#: How long a task's new owner waits for a previous owner's open transaction: the broker
#: aborts it after its transaction.timeout.ms (a worker's: 20 s; librdkafka's default:
#: 60 s) at its next check for timed-out transactions (every 10 s by default).
STABLE_WAIT_S = 90.0


def check_copartitioned(counts: Mapping[str, int], topics: Sequence[str]) -> int:
    """The common partition count of co-partitioned ``topics``; SourceError if they differ."""
    missing = [t for t in topics if t not in counts]
    if missing:
        raise SourceError(f"co-partitioned topics do not exist: {missing}")
    distinct = {counts[t] for t in topics}
    if len(distinct) != 1:
        detail = ", ".join(f"{t}={counts[t]}" for t in topics)
        raise SourceError(
            f"co-partitioned topics have different partition counts ({detail}); a join "
            f"needs identical counts so that partition i of each lands on the same task"
        )
    return distinct.pop()


class SourceConsumer(GroupMember):
    """A worker's membership in consumer group ``group_id`` and its reads of ``topics``.

    ``on_assign``/``on_revoke`` are called from inside ``consume_batch`` (that is
    where librdkafka serves rebalances) with the affected (topic, partition) list;
    ``on_assign`` may return start offsets for some of them; the others start at the
    group's committed offsets (the earliest where none), or with ``ignore_committed``
    at the earliest.
    With the eager protocol (``range``) every rebalance first revokes the whole
    assignment; ``cooperative`` (docs/design.md §6.8): only the partitions that move.

    ``ignore_committed``: a checkpointed worker positions every partition itself (a
    restore seeks to the checkpoint's offsets), and the group's committed offsets are
    its exactly-once publications' (``send_offsets_to_transaction``), which may lie
    past where a restore resumes. librdkafka can deliver a record it fetched from a
    freshly assigned partition's start offset after a seek that came right after the
    assignment (seen 7 times in 10 on the real broker); a task takes such a record from
    past its restored position as read, and drops every record below it. Started at
    the earliest, that record lies below the restored position and is dropped
    (``kstream.runtime.gate.unseen``).
    """

    def __init__(
        self,
        bootstrap: str,
        group_id: str,
        topics: Iterable[str],
        *,
        on_assign: AssignCallback | None = None,
        on_revoke: RevokeCallback | None = None,
        read_committed: bool = True,
        extra: Mapping[str, Any] | None = None,
        reachability: Reachability | None = None,
        missing_topic_grace: float = MISSING_TOPIC_GRACE_S,
        ignore_committed: bool = False,
        subscribe: bool = True,
        cooperative: bool = False,
    ) -> None:
        self.group_id = group_id
        self.cooperative = cooperative
        self.subscribed = False
        self.ignore_committed = ignore_committed
        # "No broker answers" is reported there (logged once per outage); other
        # transient errors are logged once per kind until records flow again.
        self.reach = reachability
        self._reported: set[int] = set()
        self._missing = MissingTopics(missing_topic_grace)
        self.topics = sorted(set(topics))
        self._on_assign = on_assign
        self._on_revoke = on_revoke
        self._assignment: set[TP] = set()
        self._assigned_metadata: Any = None  # the group metadata of the assignment
        self._paused: set[TP] = set()  # paused in librdkafka (see ``pause``)
        # Per partition, the offset it was last positioned at (assigned or sought to an
        # offset, not a logical one): where it reads from until it delivers (``lag``).
        self._start: dict[TP, int] = {}
        self._consumer = make_consumer(
            bootstrap,
            group_id,
            read_committed=read_committed,
            extra={
                "client.id": worker_client_id(),  # members are named <host:pid>-<uuid>
                "partition.assignment.strategy": "cooperative-sticky" if cooperative else "range",
                # Larger fetches per partition (librdkafka's default is 1 MiB): fewer
                # round trips, so a batch is rarely waited for (measured: ~1.5x
                # source throughput with 4 partitions, benchmarks/RESULTS.md).
                "max.partition.fetch.bytes": FETCH_BYTES_PER_PARTITION,
                # A partition whose prefetched queue is past librdkafka's thresholds
                # (queued.min.messages) is fetched again only after this backoff
                # (default 1 s). When the worker reads one partition while the others
                # wait (watermark alignment holds them), that partition's queue runs dry
                # long before: the loop idled up to a second at a time (w2: ~2 s of a
                # 1 M-record run). Checked again after 20 ms instead.
                "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
                **(extra or {}),
            },
        )
        if subscribe:
            self.subscribe()

    # ---- reading

    def consume_batch(self, max_records: int, timeout: float) -> dict[TP, list[RawRecord]]:
        """Up to ``max_records`` records, waiting at most ``timeout`` s, grouped by partition.

        Offsets within a partition are increasing. Transient client errors are
        logged and skipped; a fatal one raises SourceError, as does a subscribed
        topic that stays missing (:mod:`kstream.kafka.missingtopics`).
        """
        out: dict[TP, list[RawRecord]] = {}
        consumer = self._consumer
        if self._missing.due():
            self._look_up_missing()
        # Not consume(n, timeout): it idles whenever fetches arrive in smaller chunks.
        msgs = consume_available(consumer, max_records, timeout)
        if not msgs:
            return out
        msg: Any
        # A consume() returns each partition's records in runs: the batch list is looked
        # up when the partition changes, not per record.
        part: int | None = None
        topic: str | None = None
        append: Callable[[RawRecord], None] | None = None
        for msg in msgs:
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                if err.fatal() or err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                    raise SourceError(f"group {self.group_id}: consumer error: {err}")
                if err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    if self._missing.reported():
                        log.warning(
                            "group %s: %s; waiting up to %.0f s for it",
                            self.group_id,
                            err.str(),
                            self._missing.grace,
                        )
                    continue
                if err.code() == KafkaError._ALL_BROKERS_DOWN and self.reach is not None:
                    self.reach.failed(f"group {self.group_id}: {err.str()}")
                elif err.code() not in self._reported:
                    self._reported.add(err.code())
                    log.warning("group %s: transient consumer error: %s", self.group_id, err)
                continue
            if self._reported:
                self._reported.clear()
            ts_type, ts = msg.timestamp()
            p, t = msg.partition(), msg.topic()
            if p != part or t != topic or append is None:
                part, topic = p, t
                batch = out.get((t, p))
                if batch is None:
                    batch = out[(t, p)] = []
                append = batch.append
            append(
                (
                    msg.key(),
                    msg.value(),
                    None if ts_type == TIMESTAMP_NOT_AVAILABLE else ts,
                    msg.offset(),
                    msg.headers(),
                )
            )
        return out

    def _look_up_missing(self) -> None:
        """Look the subscribed topics up in metadata; SourceError if one stayed missing."""
        missing: list[str] | None
        try:
            md = self._consumer.list_topics(timeout=2.0)
        except KafkaException:
            missing = None  # unanswered: an outage, not an answer
        else:
            missing = [
                t
                for t in self.topics
                if t not in md.topics
                or md.topics[t].error is not None
                or not md.topics[t].partitions
            ]
        reason = self._missing.looked_up(missing)
        if reason is not None:
            raise SourceError(f"group {self.group_id}: {reason}")
        if not self._missing.watching:
            log.info("group %s: all subscribed topics are available again", self.group_id)

    # ---- pausing

    @property
    def paused(self) -> frozenset[TP]:
        """The assigned partitions paused now (``pause``, not ``resume``d since)."""
        return frozenset(self._paused)

    def pause(self, tps: Iterable[TP]) -> None:
        """Stop fetching ``tps`` (barrier alignment); records already returned stay returned.
        Only assigned partitions are paused; one stays paused until ``resume``d or revoked."""
        new = [tp for tp in tps if tp not in self._paused and tp in self._assignment]
        if new:
            self._consumer.pause([TopicPartition(t, p) for t, p in new])
            self._paused.update(new)

    def resume(self, tps: Iterable[TP]) -> None:
        """Fetch ``tps`` again."""
        old = [tp for tp in tps if tp in self._paused]
        if old:
            self._consumer.resume([TopicPartition(t, p) for t, p in old])
            self._paused.difference_update(old)

    def seek(self, tp: TP, offset: int) -> None:
        """Next record read from ``tp`` is at ``offset`` (restore to checkpoint offsets)."""
        try:
            self._consumer.seek(TopicPartition(tp[0], tp[1], offset))
        except KafkaException as e:
            raise SourceError(f"seek {tp[0]}[{tp[1]}] to {offset} failed: {e}") from e
        if offset >= 0:
            self._start[tp] = offset
        else:
            self._start.pop(tp, None)

    def positions(self, tps: Iterable[TP] | None = None) -> dict[TP, int | None]:
        """Offset of the next record to read per partition (None if none read or sought yet)."""
        wanted = sorted(self._assignment if tps is None else tps)
        got = self._consumer.position([TopicPartition(t, p) for t, p in wanted])
        return {
            (x.topic, x.partition): (
                None if x.offset == OFFSET_INVALID or x.offset < 0 else x.offset
            )
            for x in got
        }

    def lag(self, tps: Iterable[TP] | None = None, unknown: int | None = None) -> dict[TP, int]:
        """Per assigned partition (of ``tps``, if given) whose lag is known: records
        between its read position and the high watermark that the last fetch reported
        (no request: librdkafka's cached values).

        A partition that has delivered nothing since it was positioned has no read
        position in librdkafka, not even after a seek to an offset. Its lag is then
        counted from the offset it was positioned at, and when it was positioned at the
        earliest (a logical offset), it is 0 if the last fetch reported it empty (first
        offset still stored = end offset): an empty partition is a quiet one, not one with
        records left. Otherwise it is unknown and left out. (A partition whose lag was
        unknown counts as one with records left, and under watermark alignment held every
        other partition of its source back for good: the ~380 empty partitions of a
        1024-partition input of 1 000 keys, or a restored partition sought to its end
        that gets no new record; benchmarks/SCALING.md.) ``unknown``, if given, is the
        lag said of those, when the last fetch reported records in them."""
        out: dict[TP, int] = {}
        wanted = None if tps is None else [tp for tp in tps if tp in self._assignment]
        for tp, pos in self.positions(wanted).items():
            try:
                low, high = self._consumer.get_watermark_offsets(
                    TopicPartition(tp[0], tp[1]), cached=True
                )
            except KafkaException:
                continue
            if high is None or high < 0:
                continue
            if pos is None:
                pos = self._start.get(tp)
            if pos is not None:
                out[tp] = max(0, high - pos)
            elif low is not None and 0 <= high <= low:
                out[tp] = 0
            elif unknown is not None:
                out[tp] = unknown
        return out

    def commit(self, offsets: Mapping[TP, int]) -> None:
        """Commit ``offsets`` (next offset to read) to the group, synchronously.

        Used with checkpointing off: a restart then continues from them.
        """
        if not offsets:
            return
        try:
            self._consumer.commit(
                offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                asynchronous=False,
            )
        except KafkaException as e:
            raise SourceError(f"group {self.group_id}: offset commit failed: {e}") from e

    def committed(self, tps: Iterable[TP], timeout: float = 10.0) -> dict[TP, int | None]:
        """The group's committed offsets for ``tps`` (None where nothing is committed)."""
        got = self._consumer.committed([TopicPartition(t, p) for t, p in tps], timeout=timeout)
        return {(x.topic, x.partition): (x.offset if x.offset >= 0 else None) for x in got}

    def wait_stable(self, tps: Iterable[TP], timeout: float = STABLE_WAIT_S) -> None:
        """Return once the group's offsets of ``tps`` are stable: no transaction holding
        offsets of them is open (a read_committed fetch asks with *require stable* and is
        not answered until then: kstream.kafka.worker_transactions). SourceError past
        ``timeout`` (an open transaction is aborted by the broker once its
        ``transaction.timeout.ms`` passed)."""
        tps = sorted(tps)
        asked = [TopicPartition(t, p) for t, p in tps]
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._consumer.committed(asked, timeout=min(5.0, timeout))
                return
            except KafkaException as e:
                if time.monotonic() > deadline:
                    raise SourceError(
                        f"group {self.group_id}: the offsets of {tps} stayed unstable "
                        f"for {timeout:.0f} s (a transaction holding them is open): {e}"
                    ) from e

    def end_offsets(self, tp: TP, timeout: float = 10.0) -> int:
        """The end offset of ``tp`` (bounded runs read up to it)."""
        return self.offset_range(tp, timeout)[1]

    def offset_range(self, tp: TP, timeout: float = 10.0) -> tuple[int, int]:
        """(first offset still stored, end offset) of ``tp``; equal when it holds nothing."""
        return watermark_offsets(self._consumer, tp[0], tp[1], timeout)

    def close(self) -> None:
        """Leave the group (revocation callbacks run) and release the consumer."""
        self._paused.clear()  # nothing to resume on the way out
        self._consumer.close()
