"""A source partition's lag, as watermark alignment reads it (no broker: a fake client
with librdkafka's answers). A partition that delivered nothing has no read position in
librdkafka, even after a seek to an offset; its lag counts from where it was
positioned, and an empty one has none. An unknown lag counts as records left, which
held every other partition of the source back for good (benchmarks/SCALING.md)."""

from __future__ import annotations

from typing import Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_INVALID, TopicPartition

from kstream.kafka.source import SourceConsumer

UNKNOWN = OFFSET_INVALID  # librdkafka's -1001: no position, or no fetch reported yet


class FakeConsumer:
    def __init__(self) -> None:
        self.position_of: dict[tuple[str, int], int] = {}
        self.watermarks: dict[tuple[str, int], tuple[int, int]] = {}
        self.sought: list[tuple[str, int, int]] = []
        self.asked: list[list[tuple[str, int]]] = []  # the partitions of each position call
        self.calls: list[tuple[str, list[tuple[str, int]]]] = []  # (incremental_)(un)assign

    def consumer_group_metadata(self) -> bytes:
        return b"metadata"

    def assign(self, parts: list[Any]) -> None:
        self.calls.append(("assign", [(x.topic, x.partition) for x in parts]))

    def incremental_assign(self, parts: list[Any]) -> None:
        self.calls.append(("incremental_assign", [(x.topic, x.partition) for x in parts]))

    def incremental_unassign(self, parts: list[Any]) -> None:
        self.calls.append(("incremental_unassign", [(x.topic, x.partition) for x in parts]))

    def seek(self, tp: TopicPartition) -> None:
        self.sought.append((tp.topic, tp.partition, tp.offset))

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        self.asked.append([(x.topic, x.partition) for x in tps])
        return [
            TopicPartition(
                x.topic, x.partition, self.position_of.get((x.topic, x.partition), UNKNOWN)
            )
            for x in tps
        ]

    def get_watermark_offsets(self, tp: TopicPartition, cached: bool) -> tuple[int, int]:
        assert cached
        return self.watermarks.get((tp.topic, tp.partition), (UNKNOWN, UNKNOWN))


def _source(
    start: dict[tuple[str, int], int], cooperative: bool = False
) -> tuple[SourceConsumer, FakeConsumer]:
    s = SourceConsumer.__new__(SourceConsumer)  # a fake client instead of a consumer
    s.group_id, s.ignore_committed, s.cooperative = "g", True, cooperative
    s._assignment, s._on_revoke, s._paused, s._start = set(), None, set(), {}
    s._on_assign = lambda tps: start
    fake = FakeConsumer()
    s._consumer = fake
    s._assigned(fake, [TopicPartition("a", p) for p in range(5)])
    return s, fake


def test_a_partition_that_delivered_nothing_counts_from_where_it_was_positioned() -> None:
    s, fake = _source({("a", 1): 5, ("a", 2): 2})
    fake.watermarks = {("a", p): (0, 5) for p in range(5)} | {("a", 0): (0, 0)}
    fake.position_of = {("a", 3): 4}
    assert s.lag() == {
        ("a", 0): 0,  # empty: the fetch said first offset = end offset
        ("a", 1): 0,  # assigned at its end
        ("a", 2): 3,  # assigned at 2, nothing delivered yet
        ("a", 3): 1,  # delivered up to 4
        # ("a", 4): at the earliest of a partition with records, nothing delivered: unknown
    }
    s.seek(("a", 4), 5)
    s.seek(("a", 2), OFFSET_BEGINNING)  # logical: unknown again
    assert s.lag() == {("a", 0): 0, ("a", 1): 0, ("a", 3): 1, ("a", 4): 0}


def test_a_partition_no_fetch_reported_on_has_no_lag_and_a_revocation_forgets_the_start() -> None:
    start = {("a", 1): 5}
    s, fake = _source(start)
    assert s.lag() == {}  # no fetch yet: no end offset known
    fake.watermarks = {("a", 1): (0, 7)}
    assert s.lag() == {("a", 1): 2}
    s._revoked(fake, [TopicPartition("a", 1)])
    start.clear()  # assigned again at the earliest
    s._assigned(fake, [TopicPartition("a", 1)])
    assert s.lag() == {}


def test_the_lag_of_some_partitions_only_those_assigned() -> None:
    s, fake = _source({("a", 1): 5, ("a", 2): 2})
    fake.watermarks = {("a", p): (0, 5) for p in range(5)}
    assert s.lag([("a", 2), ("b", 0), ("a", 1)]) == {("a", 1): 0, ("a", 2): 3}
    assert fake.asked == [[("a", 1), ("a", 2)]]  # positions asked of those only


def test_a_cooperative_member_adds_and_removes_only_the_partitions_that_move() -> None:
    s, fake = _source({}, cooperative=True)
    assert fake.calls == [("incremental_assign", [("a", p) for p in range(5)])]
    s._assigned(fake, [TopicPartition("a", 7)])
    assert s.assignment == {("a", p) for p in (0, 1, 2, 3, 4, 7)}
    s._revoked(fake, [TopicPartition("a", 1)])
    assert s.assignment == {("a", p) for p in (0, 2, 3, 4, 7)}
    assert fake.calls[1:] == [
        ("incremental_assign", [("a", 7)]),
        ("incremental_unassign", [("a", 1)]),
    ]
    assert s._assigned_metadata is not None  # (still a member with partitions)


def test_an_eager_member_takes_each_assignment_whole() -> None:
    s, fake = _source({})
    s._revoked(fake, [TopicPartition("a", p) for p in range(5)])
    s._assigned(fake, [TopicPartition("a", 7)])
    assert s.assignment == {("a", 7)}
    assert [c[0] for c in fake.calls] == ["assign", "assign"]
