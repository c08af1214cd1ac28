"""The reader of a candidate's watch (kstream.hosting.election): the control topic with
open transactions too, and only the records its keys name decoded (no broker: a stand-in
consumer)."""

from __future__ import annotations

from typing import Any

import pytest

from kstream.config import JobConfig
from kstream.hosting import election as election_module
from kstream.hosting.election import ElectedCoordinator
from kstream.hosting.startup import Coordination
from kstream.kafka import control
from kstream.protocol.elasticmessages import CoordinatorPulse, Pulse
from kstream.protocol.messages import TriggerCheckpoint, encode, record_key


class _Record:
    def __init__(self, key: bytes | None, value: bytes) -> None:
        self._key, self._value = key, value

    def error(self) -> None:
        return None

    def offset(self) -> int:
        return 0

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes:
        return self._value

    def timestamp(self) -> tuple[int, int]:
        return (1, 0)


def test_the_watch_reads_open_transactions_and_decodes_only_what_it_watches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[dict[str, Any]] = []
    records = [
        _Record(b"AcknowledgeCheckpoints:a", b"not even JSON"),  # passed over, not decoded
        _Record(b"Heartbeat", b"{}"),
        _Record(record_key(Pulse("w1")).encode(), encode(Pulse("w1"))),
        _Record(b"CoordinatorPulse", encode(CoordinatorPulse("w2", True))),
        _Record(b"TriggerCheckpoint", encode(TriggerCheckpoint(3, 1, 0))),
    ]

    class Consumer:
        def assign(self, _parts: Any) -> None:
            pass

        def consume(self, n: int, _timeout: float) -> list[_Record]:
            out = records[:n]
            del records[:n]
            return out

        def close(self) -> None:
            pass

    def make_consumer(*_a: Any, **kw: Any) -> Consumer:
        made.append(kw)
        return Consumer()

    monkeypatch.setattr(control, "make_consumer", make_consumer)
    elected = ElectedCoordinator(
        JobConfig("wc", "k:9092"), Coordination(frozenset({"a"})), member=lambda: "w1"
    )
    reader = elected._watch_reader()
    assert reader is not None and made[0]["read_committed"] is False
    seen: list[Any] = []
    monkeypatch.setattr(elected, "observe", seen.append)
    elected._watch(reader)
    assert seen == [Pulse("w1"), CoordinatorPulse("w2", True), TriggerCheckpoint(3, 1, 0)]
    assert reader.skipped == 0  # the acknowledgement was never decoded
    assert {b"Pulse", b"CoordinatorPulse", b"Adopt"} <= election_module.WATCHED_KEYS


def test_a_candidate_without_pulses_watches_nothing() -> None:
    elected = ElectedCoordinator(JobConfig("wc", "k:9092"), Coordination(frozenset({"a"})))
    assert elected._watch_reader() is None
