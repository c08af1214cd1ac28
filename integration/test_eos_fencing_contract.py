"""What one exactly-once producer per worker relies on, checked on the real broker.

docs/design.md ("One transactional producer per worker") fences a worker that lost its
tasks by its consumer-group membership, as Kafka Streams' exactly-once v2 does
(KIP-447), instead of by one transactional id per task: every publishing transaction
adds its tasks' input offsets with the worker's group metadata, and a task's new owner
fetches those offsets ``read_committed`` before it reads the task's commit marker.
These tests pin the broker's and librdkafka's side of that contract; if an upgrade
changes it, the design no longer holds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from kstream.kafka.clients import (
    AdminClient,
    TopicSpec,
    ensure_topics,
    init_transactions,
    make_consumer,
    make_producer,
)

pytestmark = pytest.mark.integration

MEMBER = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}


class Group:
    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.bootstrap, self.group, self.topic = bootstrap, group, topic
        self.clients: list[Consumer | Producer] = []

    def member(self) -> Consumer:
        """A member subscribed to the topic, once it has an assignment."""
        c = make_consumer(self.bootstrap, self.group, extra=MEMBER)
        self.clients.append(c)
        c.subscribe([self.topic])
        self.poll_until(lambda: bool(c.assignment()), c)
        return c

    def poll_until(self, done: Callable[[], bool], *members: Consumer) -> None:
        deadline = time.monotonic() + 60
        while not done():
            assert time.monotonic() < deadline, "the group did not settle in 60 s"
            for m in members:
                m.poll(0.1)

    def offset_reader(self, *, read_committed: bool) -> Consumer:
        """Fetches the group's committed offsets; never joins."""
        c = make_consumer(self.bootstrap, self.group, read_committed=read_committed)
        self.clients.append(c)
        return c

    def writer(self, name: str) -> Producer:
        p = make_producer(
            self.bootstrap,
            transactional_id=f"{self.group}.{name}",
            extra={"transaction.timeout.ms": 30_000},
        )
        init_transactions(p, 30)
        self.clients.append(p)
        return p


@pytest.fixture
def g(
    kafka_bootstrap: str, kafka_admin: AdminClient, unique_name: Callable[[str], str]
) -> Iterator[Group]:
    name = unique_name("eosv2")
    ensure_topics(kafka_admin, [TopicSpec(f"{name}.in", 2), TopicSpec(f"{name}.out", 1)])
    g = Group(kafka_bootstrap, name, f"{name}.in")
    yield g
    for c in g.clients:
        if isinstance(c, Consumer):
            c.close()
        else:
            c.flush(0)


def add_offsets(g: Group, writer: Producer, metadata: object, offset: int) -> None:
    writer.begin_transaction()
    writer.produce(f"{g.group}.out", b"output")
    writer.send_offsets_to_transaction([TopicPartition(g.topic, 0, offset)], metadata, 30)


def refusal(g: Group, writer: Producer, metadata: object) -> str:
    """The error adding offsets with ``metadata`` gets (the transaction then aborted)."""
    with pytest.raises(KafkaException) as refused:
        add_offsets(g, writer, metadata, 99)
    err = refused.value.args[0]
    assert err.txn_requires_abort() and not err.fatal()  # the writer lives on
    writer.abort_transaction(30)
    return str(err.name())


def test_a_member_that_left_the_group_cannot_add_offsets_to_a_transaction(g: Group) -> None:
    old = g.member()
    metadata = old.consumer_group_metadata()
    old.close()  # as a worker the group removed (its session expired)
    g.clients.remove(old)
    g.member()  # the partitions have a new owner
    assert refusal(g, g.writer("zombie"), metadata) == "UNKNOWN_MEMBER_ID"


def test_a_member_of_an_older_generation_cannot_add_offsets_to_a_transaction(
    g: Group,
) -> None:
    first = g.member()
    before = first.consumer_group_metadata()
    writer = g.writer("first")
    add_offsets(g, writer, before, 3)  # accepted while its generation is current
    writer.commit_transaction(30)
    second = make_consumer(g.bootstrap, g.group, extra=MEMBER)
    g.clients.append(second)
    second.subscribe([g.topic])
    # Both rejoin (the eager protocol revokes everything): a new generation.
    g.poll_until(lambda: bool(second.assignment()) and bool(first.assignment()), first, second)
    assert refusal(g, writer, before) == "ILLEGAL_GENERATION"
    add_offsets(g, writer, first.consumer_group_metadata(), 4)  # its current one is fine
    writer.commit_transaction(30)


def test_a_read_committed_offset_fetch_waits_for_a_pending_transaction(g: Group) -> None:
    member = g.member()
    writer = g.writer("pending")
    add_offsets(g, writer, member.consumer_group_metadata(), 7)
    tp = [TopicPartition(g.topic, 0)]
    new_owner = g.offset_reader(read_committed=True)
    with pytest.raises(KafkaException) as waited:  # unstable: not answered, retried
        new_owner.committed(tp, timeout=3)
    assert waited.value.args[0].name() == "_TIMED_OUT"
    # read_uncommitted does not wait: it answers with what is stable now (nothing).
    assert g.offset_reader(read_committed=False).committed(tp, timeout=10)[0].offset < 0
    writer.commit_transaction(30)
    assert new_owner.committed(tp, timeout=10)[0].offset == 7


def test_the_metadata_of_a_consumer_that_is_no_member_is_not_checked(g: Group) -> None:
    """Why a worker adds the metadata of its assignment, captured when the group gave it,
    never the consumer's metadata of the moment: a consumer that was removed from the
    group while its process was stopped forgets its member id and generation, and
    metadata without them is accepted for any partition."""
    g.member()  # the partitions have an owner
    outsider = g.offset_reader(read_committed=True)  # never joined: generation -1
    writer = g.writer("outsider")
    add_offsets(g, writer, outsider.consumer_group_metadata(), 5)  # accepted
    writer.commit_transaction(30)
    assert outsider.committed([TopicPartition(g.topic, 0)], timeout=10)[0].offset == 5
