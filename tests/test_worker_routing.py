"""The router's wait for internal deliveries before acknowledgements (no broker: a
producer's flush reports how many records are still undelivered)."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError

from kstream.config import OnBadRecord
from kstream.kafka.dlq import DeadLetterWriter
from kstream.kafka.internal import DeliveryFailures, InternalDeliveryError
from kstream.worker.routing import ACK_WAIT_BEHIND_S, ACK_WAIT_S, Router


class _Producer:
    """``flush(timeout)`` returns the next of ``left`` (records still undelivered)."""

    def __init__(self, *left: int) -> None:
        self.left = list(left)
        self.timeouts: list[float] = []

    def flush(self, timeout: float) -> int:
        self.timeouts.append(timeout)
        return self.left.pop(0)


def _router(producer: Any, failures: DeliveryFailures | None = None) -> Router:
    dlq = DeadLetterWriter("app", "127.0.0.1:1", OnBadRecord.FAIL)
    return Router(producer, dlq, {"app.s.repartition": 1}, failures=failures)


def test_acknowledgements_wait_briefly_then_longer_while_deliveries_lag() -> None:
    p = _Producer(0, 3, 2, 0, 0)
    r = _router(p)
    assert [r.internal_delivered(1) for _ in range(5)] == [True, False, False, True, True]
    assert p.timeouts == [ACK_WAIT_S, ACK_WAIT_S, ACK_WAIT_BEHIND_S, ACK_WAIT_BEHIND_S, ACK_WAIT_S]


class _Sent:
    def topic(self) -> str:
        return "app.s.repartition"

    def partition(self) -> int:
        return 0


def test_a_refused_record_of_the_attempt_raises_instead_of_acknowledging() -> None:
    failures = DeliveryFailures()
    r = _router(_Producer(0, 0), failures)
    failures.of(1)(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), _Sent())
    with pytest.raises(InternalDeliveryError, match="MSG_SIZE_TOO_LARGE"):
        r.internal_delivered(1)
    assert r.internal_delivered(2)  # restored in attempt 2: attempt 1's records are stale
