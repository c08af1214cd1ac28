"""Reachability: one log line per change of state, a bounded outage; Backoff's delays."""

from __future__ import annotations

import logging

import pytest

from kstream.kafka.reachability import Backoff, BrokerOutage, Reachability


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_outage_is_logged_once_when_it_starts_and_once_when_it_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    reach = Reachability(60.0, clock=clock)
    caplog.set_level(logging.INFO, logger="kstream.kafka.reachability")
    reach.ok()
    assert caplog.records == []
    for i in range(50):  # every retry of every client reports the failure
        clock.now += 1.0
        reach.failed(f"3/3 brokers are down ({i})")
        reach.check()
    assert reach.down and reach.down_for() == 49.0
    reach.ok()
    reach.ok()
    assert not reach.down and reach.outages == 1
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "Kafka unreachable (3/3 brokers are down (0)); retrying with backoff, the job fails "
        "if this lasts over 60s (--max-outage)",
        "Kafka reachable again after 49.0s",
    ]


def test_an_outage_longer_than_the_bound_fails_with_the_reason() -> None:
    clock = Clock()
    reach = Reachability(30.0, clock=clock)
    reach.failed("first")
    clock.now += 30.0
    reach.check()  # exactly the bound: still tolerated
    clock.now += 0.5
    reach.failed("Connect to ipv4#127.0.0.1:9092 failed: Connection refused")
    with pytest.raises(BrokerOutage) as e:
        reach.check()
    assert str(e.value) == (
        "Kafka unreachable for 30s, longer than --max-outage 30s (last error: Connect to "
        "ipv4#127.0.0.1:9092 failed: Connection refused)"
    )
    reach.ok()
    reach.check()  # over: the bound counts each outage on its own
    reach.failed("again")
    clock.now += 29.0
    reach.check()


def test_backoff_doubles_up_to_its_maximum_with_jitter_below_each_step() -> None:
    b = Backoff(0.1, 1.0, rand=lambda: 1.0)
    assert [round(b.next(), 3) for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    b.reset()
    low = Backoff(0.1, 1.0, rand=lambda: 0.0)
    assert round(low.next(), 3) == 0.08
    assert round(b.next(), 3) == 0.1
