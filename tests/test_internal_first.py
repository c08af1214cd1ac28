"""Internal records first (kstream.worker.internalfirst) and the backlog's feeding order."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kstream.worker.backlog import Backlog
from kstream.worker.internalfirst import READ_PAST_MAX, STARVED_S, InternalFirst, read_past

TP = tuple[str, int]
USER = [("in", 0), ("in", 1)]
INTERNAL = [("app.stage0.repartition", 0), ("app.stage0.repartition", 1)]


class FakeConsumer:
    def __init__(self) -> None:
        self.assignment = set(USER + INTERNAL)
        self.paused: frozenset[TP] = frozenset()
        self.lags: dict[TP, int] = {}
        self.asked: list[tuple[list[TP], int | None]] = []

    def lag(self, tps: Iterable[TP] | None = None, unknown: int | None = None) -> dict[TP, int]:
        wanted = sorted(self.assignment if tps is None else tps)
        self.asked.append((wanted, unknown))
        return {tp: self.lags[tp] for tp in wanted if tp in self.lags}


def internal(topic: str) -> bool:
    return topic.endswith(".repartition")


def test_internal_records_are_starved_once_they_waited_a_period_while_user_records_came() -> None:
    source = FakeConsumer()
    first = InternalFirst(internal, now=0.0)
    source.lags = {INTERNAL[0]: 0, INTERNAL[1]: 5}
    first.read({USER[0]: [1, 2]}, 0.1)
    assert first.starved(source, 0.1 + STARVED_S / 2, busy=True) == frozenset()
    assert source.asked == []  # not looked at within the period
    assert first.starved(source, STARVED_S, busy=True) == frozenset(USER)
    assert source.asked == [(sorted(INTERNAL), 1)]  # one that delivered none: records at all
    assert first.looks == 1
    # At most once a period, even if they are still not read.
    assert first.starved(source, STARVED_S + 0.1, busy=True) == frozenset()
    assert first.starved(source, 2 * STARVED_S, busy=True) == frozenset(USER)


def test_no_starvation_while_internal_records_keep_coming() -> None:
    source = FakeConsumer()
    source.lags = {INTERNAL[0]: 100}
    first = InternalFirst(internal, now=0.0)
    t = 0.0
    for _ in range(20):
        t += STARVED_S / 2
        first.read({USER[0]: [1], INTERNAL[0]: [2]}, t)
        assert first.starved(source, t, busy=True) == frozenset()
    assert source.asked == [] and first.looks == 0


def test_no_starvation_without_internal_records_waiting_or_user_records_read() -> None:
    source = FakeConsumer()
    first = InternalFirst(internal, now=0.0)
    # No user-topic record read nor in hand: the next read gets the internal ones anyway.
    source.lags = {INTERNAL[0]: 3}
    assert first.starved(source, 10.0, busy=False) == frozenset()
    # Internal partitions caught up (or their lag unknown: no fetch yet).
    source.lags = {INTERNAL[0]: 0}
    assert first.starved(source, 20.0, busy=True) == frozenset()
    source.lags = {}
    assert first.starved(source, 30.0, busy=True) == frozenset()
    assert first.looks == 0


def test_paused_partitions_are_left_as_they_are() -> None:
    source = FakeConsumer()
    source.lags = {INTERNAL[0]: 7, INTERNAL[1]: 9}
    first = InternalFirst(internal, now=0.0)
    # An internal partition paused on purpose (its task aligns or holds) does not count;
    # a user-topic partition paused already is not paused again (nor resumed later).
    source.paused = frozenset({INTERNAL[0], USER[1]})
    assert first.starved(source, 1.0, busy=True) == frozenset({USER[0]})
    assert source.asked[-1][0] == [INTERNAL[1]]
    source.paused = frozenset(INTERNAL)
    assert first.starved(source, 2.0, busy=True) == frozenset()


def test_a_job_without_internal_topics_is_never_starved() -> None:
    source = FakeConsumer()
    source.assignment = set(USER)
    first = InternalFirst(internal, now=0.0)
    first.read({USER[0]: [1]}, 0.0)
    assert first.starved(source, 5.0, busy=True) == frozenset()
    assert source.asked == []


def test_the_backlog_feeds_first_topics_before_records_read_earlier() -> None:
    clock = iter(range(1000))
    backlog = Backlog(10, budget_s=1e9, clock=lambda: float(next(clock)), first=internal)
    backlog.add({USER[0]: list(range(5)), USER[1]: list(range(3))})
    backlog.add({INTERNAL[1]: ["a", "b"], USER[0]: [5, 6]})
    fed: list[tuple[TP, list[Any]]] = []
    backlog.feed(lambda tp, rs: fed.append((tp, rs)))
    order = [tp for tp, _rs in fed]
    assert order[0] == INTERNAL[1]
    # Each partition's records in their order, all of them.
    per: dict[TP, list[Any]] = {}
    for tp, rs in fed:
        per.setdefault(tp, []).extend(rs)
    assert per == {USER[0]: [0, 1, 2, 3, 4, 5, 6], USER[1]: [0, 1, 2], INTERNAL[1]: ["a", "b"]}


def test_first_topics_held_wait_like_any_other() -> None:
    clock = iter(range(1000))
    backlog = Backlog(10, budget_s=1e9, clock=lambda: float(next(clock)), first=internal)
    backlog.add({USER[0]: [1], INTERNAL[0]: ["x"]})
    fed: list[TP] = []
    backlog.feed(lambda tp, rs: fed.append(tp), held=frozenset({INTERNAL[0]}))
    assert fed == [USER[0]]
    assert backlog.partitions() == {INTERNAL[0]}


def test_a_starved_look_reads_past_up_to_a_bound_in_hand_then_skips() -> None:
    """After a starved look the read takes everything queued up to READ_PAST_MAX records
    in hand (at least a batch); with that many in hand, none: the loop skips the
    user-topic partitions for the read instead."""
    assert read_past(0, 2_000) == READ_PAST_MAX
    assert read_past(READ_PAST_MAX - 500, 2_000) == 2_000
    assert read_past(READ_PAST_MAX - 5_000, 2_000) == 5_000
    assert read_past(READ_PAST_MAX, 2_000) == 0
    assert read_past(READ_PAST_MAX + 1, 2_000) == 0
