"""``watermark_offsets`` asks again on what passes (no broker: a consumer stand-in)."""

from __future__ import annotations

import logging
from typing import Any, cast

import pytest

from kstream.kafka.clients import KafkaError, KafkaException, watermark_offsets
from kstream.kafka.reachability import BrokerOutage, Reachability


class _Consumer:
    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.asked = 0

    def get_watermark_offsets(self, tp: Any, timeout: float, cached: bool) -> tuple[int, int]:
        self.asked += 1
        a = self.answers.pop(0)
        if isinstance(a, KafkaError):
            raise KafkaException(a)
        return cast(tuple[int, int], a)

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> object:
        return object()


@pytest.mark.parametrize(
    "passing",
    [
        KafkaError._DESTROY_BROKER,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError._TRANSPORT,
        KafkaError.OFFSET_NOT_AVAILABLE,  # a new leader's high watermark not caught up
    ],
)
def test_an_error_that_passes_is_asked_again(passing: int) -> None:
    c = _Consumer(KafkaError(passing), (3, 9))
    assert watermark_offsets(cast(Any, c), "t", 0, timeout=10.0) == (3, 9)
    assert c.asked == 2


def test_any_other_error_is_raised_at_once() -> None:
    c = _Consumer(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), (3, 9))
    with pytest.raises(KafkaException):
        watermark_offsets(cast(Any, c), "t", 0, timeout=10.0)
    assert c.asked == 1


class _StaleLeader:
    """A consumer whose metadata cache names a dead leader: every ask times out until a
    metadata request (``list_topics``) learns the new one (librdkafka after kill -9).
    The first ``silent`` metadata requests get no answer (every broker down)."""

    def __init__(self, silent: int = 0) -> None:
        self.silent = silent
        self.refreshed = False
        self.asked = 0

    def get_watermark_offsets(self, tp: Any, timeout: float, cached: bool) -> tuple[int, int]:
        self.asked += 1
        if not self.refreshed:
            raise KafkaException(
                KafkaError(
                    KafkaError._TIMED_OUT, "Failed to get watermark offsets: Local: Timed out"
                )
            )
        return (0, 7)

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> object:
        if self.silent > 0:
            self.silent -= 1
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))
        self.refreshed = True
        return object()


def test_a_timed_out_ask_refreshes_the_leader_and_succeeds() -> None:
    c = _StaleLeader()
    assert watermark_offsets(cast(Any, c), "app.control", 0, timeout=1.0) == (0, 7)
    assert c.asked == 2


def test_no_broker_answering_is_an_outage_bounded_by_max_outage(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reach = Reachability(0.5)
    c = _StaleLeader(silent=10**6)
    with caplog.at_level(logging.WARNING), pytest.raises(BrokerOutage, match="--max-outage"):
        watermark_offsets(cast(Any, c), "app.control", 0, timeout=30.0, reach=reach)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and lines[0].startswith(
        "Kafka unreachable (watermark offsets of app.control [0]: Failed to get"
    )
    assert reach.outages == 1


def test_an_outage_that_ends_is_logged_once_each_way(caplog: pytest.LogCaptureFixture) -> None:
    reach = Reachability(60.0)
    c = _StaleLeader(silent=2)
    with caplog.at_level(logging.WARNING):
        assert watermark_offsets(cast(Any, c), "t", 0, timeout=30.0, reach=reach) == (0, 7)
    lines = [r.getMessage() for r in caplog.records]
    assert [line.split(" (")[0].split(" after")[0] for line in lines] == [
        "Kafka unreachable",
        "Kafka reachable again",
    ]
    assert not reach.down
