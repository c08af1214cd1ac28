"""A source consumer's membership in its consumer group: joining, the rebalance
callbacks, the assignment and the group metadata its transactions send (a base class of
:class:`kstream.kafka.source.SourceConsumer`, which creates the client and reads).

With the eager protocol (``range``) every rebalance first revokes the whole assignment;
with the cooperative one (``cooperative-sticky``, docs/design.md §6.8) a rebalance
assigns and revokes only the partitions that move, and the callbacks see only those.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from kstream.kafka.clients import KafkaException
from kstream.kafka.groupgeneration import group_generation
from kstream.kafka.missingtopics import MissingTopics

log = logging.getLogger(__name__)

TP = tuple[str, int]
AssignCallback = Callable[[list[TP]], Mapping[TP, int] | None]
RevokeCallback = Callable[[list[TP]], None]


class SourceError(RuntimeError):
    """The source consumer hit an error it cannot continue from."""


class GroupMember:
    """Membership in consumer group ``group_id`` (see the module)."""

    group_id: str
    topics: list[str]
    cooperative: bool
    subscribed: bool
    ignore_committed: bool
    _consumer: Any
    _on_assign: AssignCallback | None
    _on_revoke: RevokeCallback | None
    _assignment: set[TP]
    _assigned_metadata: Any  # the group metadata of the assignment
    _paused: set[TP]
    _start: dict[TP, int]
    _missing: MissingTopics
    revoking_lost = False  # inside the revocation of an assignment the group took away

    def subscribe(self) -> None:
        """Join the group (once; with ``subscribe=False`` the caller chooses when: a
        checkpointed worker first asks a running job for a hand-over, docs/design.md §6.6)."""
        if self.subscribed:
            return
        self.subscribed = True
        self._consumer.subscribe(
            self.topics, on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._lost
        )

    # ---- rebalance callbacks (run inside consume/poll)

    def _assigned(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        tps = [(p.topic, p.partition) for p in partitions]
        if self.cooperative:
            self._assignment.update(tps)  # (an increment: the others stay)
        else:
            self._assignment = set(tps)
        self._assigned_metadata = consumer.consumer_group_metadata()
        log.info(
            "group %s: assigned %s (generation %s)", self.group_id, sorted(tps), self.generation
        )
        start = self._on_assign(tps) if self._on_assign is not None else None
        # Start positions chosen by the worker (checkpoint offsets) take effect before
        # the first fetch: assign with explicit offsets.
        for p in partitions:
            off = start.get((p.topic, p.partition)) if start else None
            if off is not None:
                p.offset = off
                self._start[(p.topic, p.partition)] = off
            elif self.ignore_committed:
                p.offset = OFFSET_BEGINNING
        if self.cooperative:
            consumer.incremental_assign(partitions)
        else:
            consumer.assign(partitions)

    def _lost(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        """The group removed this member (its session ended): a revocation it did not
        give, ``revoking_lost`` while the revocation callback runs."""
        self.revoking_lost = True
        try:
            self._revoked(consumer, partitions)
        finally:
            self.revoking_lost = False

    def _revoked(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        tps = [(p.topic, p.partition) for p in partitions]
        self._resume_revoked(consumer, tps)
        self._assignment.difference_update(tps)
        for tp in tps:
            self._start.pop(tp, None)
        if not self._assignment:
            self._assigned_metadata = None
        log.info("group %s: revoked %s", self.group_id, sorted(tps))
        if self._on_revoke is not None:
            self._on_revoke(tps)
        if self.cooperative and tps:
            consumer.incremental_unassign(partitions)

    # ---- membership

    @property
    def assignment(self) -> set[TP]:
        """The (topic, partition)s currently assigned to this member."""
        return set(self._assignment)

    @property
    def waiting_for_topics(self) -> bool:
        """A subscribed topic was reported missing and has not been seen since."""
        return self._missing.watching

    @property
    def member_id(self) -> str | None:
        """This member's id in the group (None before joining)."""
        mid = self._consumer.memberid()
        return mid or None

    @property
    def generation(self) -> int | None:
        """The group generation of the current assignment (None if not joined)."""
        md = self._consumer.consumer_group_metadata()
        return group_generation(md) if isinstance(md, bytes) else None

    def group_metadata(self) -> Any:
        """Opaque group metadata for ``send_offsets_to_transaction``: the one captured
        with the current assignment (member id and generation), so the broker refuses it
        once the group moved on — never the consumer's metadata of the moment, which
        after the group removed this member has no member id and no generation, and
        which the broker does not check (integration/test_eos_fencing_contract.py).
        None while this worker holds no assignment. Cooperative: a rebalance may give
        a new generation and call no callback; the metadata of the moment is taken
        while it names a generation (still a member), else the captured one stays."""
        if self.cooperative and self._assigned_metadata is not None:
            md = self._consumer.consumer_group_metadata()
            if isinstance(md, bytes) and group_generation(md) is not None:
                self._assigned_metadata = md
        return self._assigned_metadata

    def _resume_revoked(self, consumer: Any, tps: list[TP]) -> None:
        """Resume the paused partitions of a revocation while they are still assigned.

        librdkafka keeps a partition's pause through a rebalance: revoked and later
        assigned to this member again, it is still paused, and never fetched unless
        resumed (confirmed with librdkafka 2.16 on the real broker; confluentinc/
        librdkafka#1849). A worker that forgot the pause with the revocation never read
        such a partition again — at 1024 partitions on 4 workers, a quarter of each
        worker's partitions, and watermark alignment then held back all the others
        (benchmarks/SCALING.md). So every assignment starts unpaused, as Kafka's own
        consumer's does."""
        paused = [tp for tp in tps if tp in self._paused]
        if not paused:
            return
        try:
            consumer.resume([TopicPartition(t, p) for t, p in paused])
        except KafkaException as e:  # a local call: only a bug or a closing client
            raise SourceError(f"group {self.group_id}: resuming revoked {paused}: {e}") from e
        self._paused.difference_update(paused)
