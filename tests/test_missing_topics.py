"""The watch over subscribed topics the consumer reported unknown (kstream/kafka/missingtopics.py)."""

from __future__ import annotations

from kstream.kafka.missingtopics import MissingTopics


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_no_report_no_lookup() -> None:
    clock = Clock()
    watch = MissingTopics(grace=30, interval=1, clock=clock)
    clock.now += 1000
    assert not watch.due()
    assert not watch.watching


def test_a_topic_back_in_the_next_lookup_ends_the_watch() -> None:
    clock = Clock()
    watch = MissingTopics(grace=30, interval=1, clock=clock)
    assert watch.reported()
    assert not watch.reported()  # one watch, however many reports
    assert watch.due()
    assert watch.looked_up(["t.repartition"]) is None
    assert not watch.due()  # next lookup after the interval
    clock.now += 1
    assert watch.due()
    assert watch.looked_up([]) is None
    assert not watch.watching
    clock.now += 100
    assert not watch.due()


def test_a_topic_missing_for_the_grace_is_fatal() -> None:
    clock = Clock()
    watch = MissingTopics(grace=30, interval=1, clock=clock)
    watch.reported()
    reasons = []
    for _ in range(31):
        reasons.append(watch.looked_up(["b", "a"]))
        clock.now += 1
    assert reasons[:30] == [None] * 30
    assert reasons[30] == "subscribed topics ['a', 'b'] do not exist (missing for 30 s)"


def test_unanswered_lookups_do_not_count_toward_the_grace() -> None:
    clock = Clock()
    watch = MissingTopics(grace=30, interval=1, clock=clock)
    watch.reported()
    for _ in range(100):  # brokers down: nobody answers
        assert watch.looked_up(None) is None
        clock.now += 1
    assert watch.watching
    assert watch.looked_up(["a"]) is None  # the first answer starts the grace
    clock.now += 29
    assert watch.looked_up(["a"]) is None
    clock.now += 1
    assert watch.looked_up(["a"]) is not None


def test_a_new_report_after_recovery_starts_a_fresh_grace() -> None:
    clock = Clock()
    watch = MissingTopics(grace=30, interval=1, clock=clock)
    watch.reported()
    watch.looked_up(["a"])
    clock.now += 29
    assert watch.looked_up([]) is None  # back
    clock.now += 5
    assert watch.reported()
    assert watch.looked_up(["a"]) is None
    clock.now += 29
    assert watch.looked_up(["a"]) is None
