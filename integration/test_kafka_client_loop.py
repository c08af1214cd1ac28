"""The client loop later issues rely on, proven on a real broker.

Topic creation, a consumer group with manual commits, transactions with
``read_committed`` readers, and fencing by ``transactional.id``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest

from integration.kafkatools import (
    committed_offsets,
    consume,
    end_offsets,
    produce,
    read_to_end,
    wait_for_assignment,
)
from kstream.kafka.clients import (
    AdminClient,
    KafkaError,
    KafkaException,
    TopicPartition,
    TopicSpec,
    ensure_topics,
    make_consumer,
    make_producer,
    partition_counts,
)

pytestmark = pytest.mark.integration

N_RECORDS = 10_000
PARTITIONS = 4


def test_create_topics_with_partition_counts(
    kafka_admin: AdminClient, unique_name: Callable[[str], str]
) -> None:
    a, b = unique_name("one"), unique_name("six")
    ensure_topics(kafka_admin, [TopicSpec(a, 1), TopicSpec(b, 6)])
    assert partition_counts(kafka_admin, [a, b, unique_name("absent")]) == {a: 1, b: 6}
    # Creating again is a no-op and keeps the original count.
    ensure_topics(kafka_admin, [TopicSpec(b, 3)])
    assert partition_counts(kafka_admin, [b]) == {b: 6}


def test_group_consumes_every_record_once_and_commits_end_offsets(
    kafka_bootstrap: str, kafka_admin: AdminClient, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("loop"), unique_name("group")
    ensure_topics(kafka_admin, [TopicSpec(topic, PARTITIONS)])
    expected = [(f"k{i % 97}".encode(), f"v{i}".encode()) for i in range(N_RECORDS)]
    assert produce(make_producer(kafka_bootstrap), topic, expected) == N_RECORDS

    consumer = make_consumer(kafka_bootstrap, group)
    consumer.subscribe([topic])
    try:
        got = consume(consumer, N_RECORDS)
        consumer.commit(asynchronous=False)
        ends = end_offsets(consumer, topic, PARTITIONS)
        assert Counter(got) == Counter(expected)  # every key/value exactly once
        assert sum(ends.values()) == N_RECORDS
        assert committed_offsets(consumer, topic, PARTITIONS) == ends
    finally:
        consumer.close()

    # A new member of the same group starts at the committed offsets: it gets
    # nothing of the first batch, and exactly the one record produced afterwards.
    again = make_consumer(kafka_bootstrap, group)
    again.subscribe([topic])
    try:
        assert {tp.partition for tp in wait_for_assignment(again)} == set(range(PARTITIONS))
        produce(make_producer(kafka_bootstrap), topic, [(b"late", b"after-commit")])
        assert consume(again, 1, timeout=30.0) == [(b"late", b"after-commit")]
        assert again.consume(10, timeout=1.0) == []
    finally:
        again.close()


def test_read_committed_sees_exactly_committed_transactions(
    kafka_bootstrap: str, kafka_admin: AdminClient, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("txn")
    ensure_topics(kafka_admin, [TopicSpec(topic, 1)])
    producer = make_producer(kafka_bootstrap, transactional_id=unique_name("txid"))
    producer.init_transactions(30.0)

    def batch(tag: str, n: int) -> list[tuple[bytes, bytes]]:
        return [(f"{tag}{i}".encode(), f"{tag}-value-{i}".encode()) for i in range(n)]

    producer.begin_transaction()
    produce(producer, topic, batch("c", 5))
    producer.commit_transaction(30.0)
    producer.begin_transaction()
    produce(producer, topic, batch("a", 4))
    producer.abort_transaction(30.0)
    producer.begin_transaction()
    produce(producer, topic, batch("d", 3))
    producer.commit_transaction(30.0)

    def read(read_committed: bool, group: str) -> list[tuple[bytes | None, bytes | None]]:
        consumer = make_consumer(kafka_bootstrap, group, read_committed=read_committed)
        consumer.assign([TopicPartition(topic, 0, 0)])
        try:
            return read_to_end(consumer, topic, 1)
        finally:
            consumer.close()

    assert read(True, unique_name("rc")) == batch("c", 5) + batch("d", 3)
    # The aborted batch really was written: an uncommitted reader sees it.
    assert read(False, unique_name("ru")) == batch("c", 5) + batch("a", 4) + batch("d", 3)


def test_same_transactional_id_fences_the_first_producer(
    kafka_bootstrap: str, kafka_admin: AdminClient, unique_name: Callable[[str], str]
) -> None:
    topic, txid = unique_name("fence"), unique_name("txid")
    ensure_topics(kafka_admin, [TopicSpec(topic, 1)])
    first = make_producer(kafka_bootstrap, transactional_id=txid)
    first.init_transactions(30.0)
    first.begin_transaction()
    produce(first, topic, [(b"k", b"zombie")])

    second = make_producer(kafka_bootstrap, transactional_id=txid)
    second.init_transactions(30.0)  # fences `first` and aborts its open transaction

    with pytest.raises(KafkaException) as info:
        first.commit_transaction(30.0)
    err: KafkaError = info.value.args[0]
    assert err.code() == KafkaError._FENCED, err
    assert err.fatal() is True

    second.begin_transaction()
    produce(second, topic, [(b"k", b"owner")])
    second.commit_transaction(30.0)
    reader = make_consumer(kafka_bootstrap, unique_name("rc"))
    reader.assign([TopicPartition(topic, 0, 0)])
    try:
        assert read_to_end(reader, topic, 1) == [(b"k", b"owner")]
    finally:
        reader.close()


def test_dev_cli_topics_produce_consume_round_trip(
    kafka_bootstrap: str, kafka_admin: AdminClient, unique_name: Callable[[str], str]
) -> None:
    from click.testing import CliRunner

    from kstream.cli import main

    topic, runner = unique_name("cli"), CliRunner()
    b = ["--bootstrap", kafka_bootstrap]
    created = runner.invoke(main, ["dev", "topics", "create", topic, "--partitions", "2", *b])
    assert (created.exit_code, created.output) == (0, f"{topic}\t2 partitions\n")
    produced = runner.invoke(
        main, ["dev", "produce", topic, "--key-sep", "|", *b], input="k1|one\nk2|two\nthree\n"
    )
    assert produced.exit_code == 0, produced.output
    consumed = runner.invoke(
        main, ["dev", "consume", topic, "--from-beginning", "--max", "3", "--timeout", "30", *b]
    )
    assert consumed.exit_code == 0, consumed.output
    assert sorted(consumed.output.splitlines()) == ["\tthree", "k1\tone", "k2\ttwo"]
