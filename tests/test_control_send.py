"""ControlClient.send_all: several messages written together, one wait for all, and a
failed write written again (only it), with the same outage and refusal rules as send.

The producer is replaced by a recording stand-in (no broker: what is checked is the
client's own retry logic; the real producer's behaviour is covered by the integration
tests' outages)."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError

from kstream.kafka.control import ControlClient, ControlError
from kstream.kafka.reachability import Reachability
from kstream.protocol.messages import Heartbeat, Message, decode


class RecordingProducer:
    """Keeps what is produced; ``flush`` delivers it, failing the writes ``fail`` names
    (the message's member) once each with the error given."""

    def __init__(self, fail: dict[str, KafkaError]) -> None:
        self.fail = dict(fail)
        self.written: list[list[str]] = []  # the members produced, per flush
        self._queued: list[tuple[str, Any]] = []

    def produce(self, topic: str, value: bytes, key: str, on_delivery: Any) -> None:
        msg = decode(value)
        assert isinstance(msg, Heartbeat)
        self._queued.append((msg.member, on_delivery))

    def flush(self, timeout: float) -> int:
        self.written.append([m for m, _ in self._queued])
        for member, callback in self._queued:
            callback(self.fail.pop(member, None), None)
        self._queued = []
        return 0

    def poll(self, timeout: float) -> int:
        return 0


def _client(producer: RecordingProducer) -> ControlClient:
    """A client writing through ``producer``; its reader (which would need a broker) is
    never made: sending does not use it."""
    c = ControlClient.__new__(ControlClient)
    c.topic = "app.control"
    c.reach = Reachability(300.0)
    c._producer = producer  # type: ignore[assignment]  # the recording stand-in
    return c


def _beats(*members: str) -> list[Message]:
    return [Heartbeat(m, (), 1) for m in members]


def test_messages_are_written_together_and_only_a_failed_one_again() -> None:
    timed_out = KafkaError(KafkaError._MSG_TIMED_OUT)
    producer = RecordingProducer({"b": timed_out})
    c = _client(producer)
    c.send_all(_beats("a", "b", "c"))
    assert producer.written == [["a", "b", "c"], ["b"]]
    assert not c.reach.down


def test_a_refused_write_is_a_control_error_and_a_dropped_report() -> None:
    refused = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)
    producer = RecordingProducer({"b": refused})
    c = _client(producer)
    with pytest.raises(ControlError, match="Heartbeat and 1 more"):
        c.send_all(_beats("a", "b"))
    producer.fail = {"a": refused}
    assert c.report_all(_beats("a")) is False
    assert c.report_all([]) is True
    assert producer.written == [["a", "b"], ["a"]]


def test_posted_messages_are_written_in_order_without_a_wait_and_a_lost_one_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    producer = RecordingProducer({"b": KafkaError(KafkaError._MSG_TIMED_OUT)})
    c = _client(producer)
    c.post_all(_beats("a", "b"))
    c.post_all(_beats("c"))
    assert producer.written == []  # nothing waited for the broker
    producer.flush(1.0)  # the client delivers them (poll, close)
    assert producer.written == [["a", "b", "c"]]
    assert [r.getMessage() for r in caplog.records] == [
        "control report Heartbeat to app.control dropped: Local: Message timed out"
    ]
