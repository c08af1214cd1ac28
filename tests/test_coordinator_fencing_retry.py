"""The coordinator's start fences its predecessor (``init_transactions``) although the
transaction coordinator's broker was just killed: a timed-out init is asked again; no
broker answering past --max-outage fails with OutageExceeded (no broker: stand-ins)."""

from __future__ import annotations

from typing import Any

import pytest

from kstream.kafka import coordinator_channel
from kstream.kafka.clients import KafkaError, KafkaException
from kstream.kafka.control import ControlError, OutageExceeded
from kstream.kafka.coordinator_channel import CoordinatorChannel


class _Reader:
    max_epoch = 0

    def __init__(self, *_a: Any, **_k: Any) -> None:
        pass

    def read_to_end(self, timeout: float) -> list[Any]:
        return []

    def close(self) -> None:
        pass


def _channel(monkeypatch: pytest.MonkeyPatch, answers: list[Any], max_outage: float) -> Any:
    asked: list[float] = []
    last = answers[-1]  # repeated once the list is used up

    def init(_producer: Any, timeout: float) -> None:
        asked.append(timeout)
        a = answers.pop(0) if answers else last
        if a is not None:
            raise KafkaException(
                KafkaError(a, "Failed to initialize Producer ID: Local: Timed out")
            )

    monkeypatch.setattr(coordinator_channel, "ensure_control_topic", lambda *_a, **_k: None)
    monkeypatch.setattr(coordinator_channel, "init_transactions", init)
    monkeypatch.setattr(coordinator_channel, "ControlReader", _Reader)
    ch = CoordinatorChannel("127.0.0.1:1", "app", max_outage=max_outage)
    return ch, asked


def test_a_timed_out_fencing_is_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    ch, asked = _channel(monkeypatch, [KafkaError._TIMED_OUT, KafkaError._TIMED_OUT, None], 60)
    assert ch.open(timeout=5.0) == []
    assert len(asked) == 3
    assert not ch.reach.down


def test_fencing_that_never_gets_through_fails_past_max_outage(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ch, _asked = _channel(monkeypatch, [KafkaError._TIMED_OUT], 0.3)
    with pytest.raises(OutageExceeded, match="--max-outage"):
        ch.open(timeout=0.2)
    assert ch.reach.outages == 1


def test_a_refusal_fails_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    ch, asked = _channel(monkeypatch, [KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED], 60)
    with pytest.raises(ControlError, match="fencing the previous coordinator of 'app'"):
        ch.open(timeout=5.0)
    assert len(asked) == 1


def test_a_fenced_coordinators_channel_closes_without_raising(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A coordinator fenced mid-run (another took over) closes its channel: librdkafka's
    flush then raises the producer's fatal error. Raised out of the close, it made the
    fenced coordinator look crashed (unavailable), so it restarted and fenced the one
    that had taken over (seen under load, integration/test_coordinator_host_kill.py)."""
    ch, _asked = _channel(monkeypatch, [None], 60)
    ch.open(timeout=5.0)

    class Fenced:
        def flush(self, _timeout: float) -> int:
            raise KafkaException(
                KafkaError(KafkaError._FENCED, "Failed to end transaction: fenced", fatal=True)
            )

    ch._producer = Fenced()
    ch.close()  # no exception
