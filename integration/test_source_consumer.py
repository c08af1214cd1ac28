"""Source consumer on a real broker: range co-partitioning, batches, seek, commit, membership."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from kstream.kafka.clients import AdminClient, TopicSpec, ensure_topics, make_producer
from kstream.kafka.source import TP, SourceConsumer, SourceError, check_copartitioned
from kstream.names import worker_client_id

pytestmark = pytest.mark.integration


def _poll_until(
    consumers: list[SourceConsumer], done: Callable[[], bool], what: str, timeout: float = 60.0
) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{what} not reached in {timeout}s; assignments: {[sorted(c.assignment) for c in consumers]}"
            )
        for c in consumers:
            c.consume_batch(100, 0.1)


def test_range_assignment_co_partitions_two_topics_across_two_members(
    kafka_bootstrap: str, kafka_admin: AdminClient, unique_name: Callable[[str], str]
) -> None:
    left, right = unique_name("left"), unique_name("right")
    ensure_topics(kafka_admin, [TopicSpec(left, 4), TopicSpec(right, 4)])
    group = unique_name("group")
    events: list[tuple[str, list[TP]]] = []
    a = SourceConsumer(
        kafka_bootstrap, group, [left, right], on_assign=lambda tps: events.append(("a+", tps))
    )
    b = SourceConsumer(
        kafka_bootstrap, group, [right, left], on_revoke=lambda tps: events.append(("b-", tps))
    )
    try:
        everything = {(t, p) for t in (left, right) for p in range(4)}
        _poll_until(
            [a, b],
            lambda: (
                bool(a.assignment)
                and bool(b.assignment)
                and a.assignment | b.assignment == everything
                and not a.assignment & b.assignment
            ),
            "a split of all 8 partitions between both members",
        )
        for c in (a, b):
            lefts = {p for t, p in c.assignment if t == left}
            rights = {p for t, p in c.assignment if t == right}
            assert lefts == rights, f"member {c.member_id}: {left}={lefts} {right}={rights}"
            assert len(lefts) == 2
            # Named by host and pid (client.id), so the broker's logs and status match.
            assert c.member_id is not None and c.member_id.startswith(f"{worker_client_id()}-")
        assert a.generation is not None and a.generation == b.generation
        assert any(kind == "a+" for kind, _ in events)
    finally:
        a.close()
        b.close()


def test_batches_seek_pause_commit_and_positions(
    kafka_bootstrap: str, kafka_admin: AdminClient, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("src")
    ensure_topics(kafka_admin, [TopicSpec(topic, 2)])
    producer = make_producer(kafka_bootstrap)
    for i in range(10):
        producer.produce(
            topic,
            value=f"v{i}".encode(),
            key=f"k{i}".encode(),
            partition=i % 2,
            timestamp=100 + i,
            headers=[("h", b"x")],
        )
    assert producer.flush(20) == 0
    group = unique_name("group")

    src = SourceConsumer(kafka_bootstrap, group, [topic], on_assign=lambda tps: {(topic, 1): 3})
    try:
        got: dict[TP, list[tuple[bytes | None, bytes | None, int | None, int]]] = {}

        def read_some() -> bool:
            for tp, recs in src.consume_batch(50, 0.2).items():
                got.setdefault(tp, []).extend((k, v, ts, off) for k, v, ts, off, _h in recs)
            return sum(len(v) for v in got.values()) >= 7

        _poll_until([], read_some, "7 records (5 from p0, 2 from p1 starting at offset 3)")
        assert got == {
            (topic, 0): [
                (f"k{i}".encode(), f"v{i}".encode(), 100 + i, i // 2) for i in (0, 2, 4, 6, 8)
            ],
            (topic, 1): [(b"k7", b"v7", 107, 3), (b"k9", b"v9", 109, 4)],
        }
        assert src.positions() == {(topic, 0): 5, (topic, 1): 5}
        assert src.end_offsets((topic, 0)) == 5

        # seek back on p0 while p1 is paused: only p0's records come again
        src.pause([(topic, 1)])
        src.seek((topic, 0), 3)
        src.seek((topic, 1), 0)
        again: list[tuple[TP, int]] = []

        def reread() -> bool:
            for tp, recs in src.consume_batch(50, 0.2).items():
                again.extend((tp, r[3]) for r in recs)
            return len(again) >= 2

        _poll_until([], reread, "p0 offsets 3 and 4 again")
        assert again == [((topic, 0), 3), ((topic, 0), 4)]
        src.resume([(topic, 1)])

        src.commit({(topic, 0): 5, (topic, 1): 2})
        assert src.committed([(topic, 0), (topic, 1)]) == {(topic, 0): 5, (topic, 1): 2}
    finally:
        src.close()


def test_copartitioning_check() -> None:
    assert check_copartitioned({"a": 4, "b": 4}, ["a", "b"]) == 4
    with pytest.raises(SourceError, match=r"different partition counts \(a=4, b=3\)"):
        check_copartitioned({"a": 4, "b": 3}, ["a", "b"])
    with pytest.raises(SourceError, match=r"do not exist: \['c'\]"):
        check_copartitioned({"a": 4}, ["a", "c"])


def test_a_subscribed_topic_created_within_the_grace_is_read_one_missing_past_it_is_fatal(
    kafka_bootstrap: str, kafka_admin: AdminClient, unique_name: Callable[[str], str]
) -> None:
    late, never = unique_name("late"), unique_name("never")
    c = SourceConsumer(kafka_bootstrap, unique_name("group"), [late], missing_topic_grace=20.0)
    try:
        deadline = time.monotonic() + 20
        while not c.waiting_for_topics:
            assert time.monotonic() < deadline, "no missing-topic report"
            c.consume_batch(100, 0.1)
        ensure_topics(kafka_admin, [TopicSpec(late, 1)])
        p = make_producer(kafka_bootstrap)
        p.produce(late, b"v", key=b"k")
        p.flush(10)
        got: list[bytes | None] = []
        deadline = time.monotonic() + 60
        while not got:
            assert time.monotonic() < deadline, "the late topic was never read"
            for recs in c.consume_batch(100, 0.2).values():
                got.extend(r[1] for r in recs)
        assert got == [b"v"]
    finally:
        c.close()
    c = SourceConsumer(kafka_bootstrap, unique_name("group"), [never], missing_topic_grace=2.0)
    try:
        deadline = time.monotonic() + 60
        with pytest.raises(SourceError, match=rf"subscribed topics \['{never}'\] do not exist"):
            while time.monotonic() < deadline:
                c.consume_batch(100, 0.1)
    finally:
        c.close()


def test_a_partition_paused_then_revoked_and_assigned_back_is_read_without_a_resume(
    kafka_bootstrap: str, kafka_admin: AdminClient, unique_name: Callable[[str], str]
) -> None:
    """librdkafka keeps a partition's pause through a rebalance: one member pauses all
    its partitions, a second joins, and the first gets half of them back still paused.
    A worker that forgot the pause with the revocation never read them again (1024
    partitions on 4 workers: a quarter of each worker's partitions, and watermark
    alignment then held every other one back). An assignment starts unpaused."""
    topic, group = unique_name("src"), unique_name("group")
    ensure_topics(kafka_admin, [TopicSpec(topic, 4)])
    a = SourceConsumer(kafka_bootstrap, group, [topic], ignore_committed=True)
    b: SourceConsumer | None = None
    try:
        everything = {(topic, p) for p in range(4)}
        _poll_until([a], lambda: a.assignment == everything, "a holding all 4 partitions")
        a.pause(everything)
        assert a.paused == everything
        b = SourceConsumer(kafka_bootstrap, group, [topic], ignore_committed=True)
        both = [a, b]
        _poll_until(
            both,
            lambda: len(a.assignment) == 2 and len(b.assignment) == 2,
            "a split of the 4 partitions between both members",
        )
        assert a.paused == frozenset()
        producer = make_producer(kafka_bootstrap)
        for p in range(4):
            producer.produce(topic, value=b"v", key=b"k", partition=p)
        assert producer.flush(30) == 0
        read: dict[TP, int] = {}
        deadline = time.monotonic() + 60
        while len(read) < 4 and time.monotonic() < deadline:
            for c in both:
                for tp, records in c.consume_batch(100, 0.1).items():
                    read[tp] = read.get(tp, 0) + len(records)
        assert read == {tp: 1 for tp in everything}, f"a holds {sorted(a.assignment)}"
    finally:
        a.close()
        if b is not None:
            b.close()


def test_the_lag_of_a_partition_that_delivered_nothing_is_known_when_it_is_empty_or_at_its_end(
    kafka_bootstrap: str, kafka_admin: AdminClient, unique_name: Callable[[str], str]
) -> None:
    """Watermark alignment counts a partition whose lag is unknown as one with records
    left, holding every other partition of its source back. librdkafka gives no read
    position to a partition that delivered nothing — an empty one, or one sought to its
    end — so the source counts from where it was positioned: both have lag 0."""
    topic, group = unique_name("src"), unique_name("group")
    ensure_topics(kafka_admin, [TopicSpec(topic, 4)])
    producer = make_producer(kafka_bootstrap)
    for p in (1, 2, 3):
        for i in range(5):
            producer.produce(topic, value=b"v", key=f"k{i}".encode(), partition=p)
    assert producer.flush(30) == 0
    positioned = {(topic, 2): 5, (topic, 3): 2}  # 0 and 1 start at the earliest
    a = SourceConsumer(
        kafka_bootstrap, group, [topic], on_assign=lambda tps: positioned, ignore_committed=True
    )
    try:
        read: dict[TP, int] = {}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for tp, records in a.consume_batch(100, 0.1).items():
                read[tp] = read.get(tp, 0) + len(records)
            lag = a.lag()
            if read == {(topic, 1): 5, (topic, 3): 3} and len(lag) == 4:
                break
        assert read == {(topic, 1): 5, (topic, 3): 3}
        assert a.positions()[(topic, 0)] is None and a.positions()[(topic, 2)] is None
        lag = a.lag()
        assert lag[(topic, 0)] == 0  # empty
        assert lag[(topic, 2)] == 0  # sought to its end
        assert lag[(topic, 1)] == lag[(topic, 3)] == 0  # read to their end
    finally:
        a.close()
