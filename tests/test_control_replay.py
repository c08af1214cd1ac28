"""Replayed coordinator messages are recognised and skipped (issue 37, point A).

A copy of a genuine signed message written back to ``<app>.control`` verifies (the
signature covers the bytes); it must stop nobody. The rule
(:mod:`kstream.protocol.replay`): a signed message whose (epoch, seq) stamp is not
above the newest one read is a replay. The pure rule is tested directly; the
coordinator's channel and a worker's client are tested with their real reading code
over an in-memory topic (no broker: the broker's part is
``integration/test_control_integrity.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError

from kstream.kafka import control, coordinator_channel
from kstream.kafka.control import ControlClient, CoordinatorFenced
from kstream.kafka.coordinator_channel import CoordinatorChannel
from kstream.protocol.messages import (
    CheckpointCompleted,
    JobFailed,
    Message,
    Restore,
    Resume,
    TriggerCheckpoint,
    encode,
)
from kstream.protocol.replay import ReplayGuard, Stamp
from kstream.protocol.signing import sign, verify

KEY = b"k" * 32


def test_only_stamps_above_the_newest_admitted_are_admitted() -> None:
    g = ReplayGuard()
    assert g.admit(Stamp(3, 1)) and g.admit(Stamp(3, 2)) and g.admit(Stamp(3, 7))
    assert not g.admit(Stamp(3, 7))  # the same message again
    assert not g.admit(Stamp(3, 2))  # an older one of the same epoch
    assert not g.admit(Stamp(2, 99))  # any of an older epoch
    assert g.admit(Stamp(4, 1))  # a successor's first message
    assert not g.admit(Stamp(3, 8))  # its predecessor is fenced: a copy
    assert (g.last, g.replayed) == (Stamp(4, 1), 4)


def test_messages_signed_before_sequence_numbers_count_while_their_epoch_is_newest() -> None:
    g = ReplayGuard()
    assert g.admit(Stamp(2, None)) and g.admit(Stamp(2, None))  # cannot be told apart
    assert not g.admit(Stamp(1, None))
    assert g.admit(Stamp(3, 1))  # the first coordinator after the upgrade
    assert not g.admit(Stamp(2, None)) and not g.admit(Stamp(3, None))
    assert g.admit(Stamp(3, 2))


def test_the_stamp_is_signed_and_old_signatures_still_verify() -> None:
    data = sign(encode(CheckpointCompleted(5, 2)), KEY, 3, 17)
    assert verify(data, KEY) == Stamp(3, 17)
    assert verify(data.replace(b'"seq":17', b'"seq":18'), KEY) is None  # renumbered
    # A message signed before sequence numbers (the earlier wire form).
    import hashlib
    import hmac

    body = encode(CheckpointCompleted(5, 2))[:-1] + b',"epoch":3'
    mac = hmac.new(KEY, body + b"}", hashlib.sha256).hexdigest().encode()
    legacy = body + b',"sig":"' + mac + b'"}'
    assert verify(legacy, KEY) == Stamp(3, None)


# --- an in-memory control topic behind the real reading and writing code ----------------


class _Eof:
    def code(self) -> int:
        return KafkaError._PARTITION_EOF


class _Record:
    def __init__(self, offset: int, value: bytes | None, error: Any = None) -> None:
        self._offset, self._value, self._error = offset, value, error

    def error(self) -> Any:
        return self._error

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes | None:
        return self._value

    def timestamp(self) -> tuple[int, int]:
        return (1, 0)


class Topic:
    """One partition: the committed record values in order."""

    def __init__(self) -> None:
        self.values: list[bytes] = []


class FakeConsumer:
    def __init__(self, topic: Topic) -> None:
        self.topic, self.pos, self.eof_at = topic, 0, -1

    def assign(self, _parts: Any) -> None:
        pass

    def consume(self, n: int, _timeout: float) -> list[_Record]:
        end = len(self.topic.values)
        out = [_Record(o, self.topic.values[o]) for o in range(self.pos, min(end, self.pos + n))]
        self.pos += len(out)
        if not out and self.eof_at != end:
            self.eof_at = end
            out = [_Record(end, None, _Eof())]
        return out

    def poll(self, _timeout: float) -> _Record | None:
        got = self.consume(1, 0)
        return got[0] if got else None

    def close(self) -> None:
        pass


class FakeTransactionalProducer:
    def __init__(self, topic: Topic) -> None:
        self.topic, self.open_txn = topic, list[bytes]()

    def begin_transaction(self) -> None:
        self.open_txn = []

    def produce(self, _topic: str, value: bytes, key: str) -> None:
        self.open_txn.append(value)

    def commit_transaction(self, _timeout: float) -> None:
        self.topic.values += self.open_txn

    def flush(self, _timeout: float) -> int:
        return 0


class _NoProducer:
    def poll(self, _timeout: float) -> int:
        return 0

    def flush(self, _timeout: float) -> int:
        return 0


@pytest.fixture
def topic(monkeypatch: pytest.MonkeyPatch) -> Iterator[Topic]:
    t = Topic()
    monkeypatch.setattr(control, "make_consumer", lambda *_a, **_k: FakeConsumer(t))
    monkeypatch.setattr(control, "make_producer", lambda *_a, **_k: _NoProducer())
    monkeypatch.setattr(control, "watermark_offsets", lambda *_a, **_k: (0, len(t.values)))
    monkeypatch.setattr(
        coordinator_channel, "make_producer", lambda *_a, **_k: FakeTransactionalProducer(t)
    )
    monkeypatch.setattr(coordinator_channel, "ensure_control_topic", lambda *_a, **_k: None)
    monkeypatch.setattr(coordinator_channel, "init_transactions", lambda *_a, **_k: None)
    yield t


def _coordinator() -> CoordinatorChannel:
    ch = CoordinatorChannel("localhost:1", "app", key=KEY)
    ch.open(timeout=5.0)
    return ch


def _drain(ch: CoordinatorChannel) -> list[Message]:
    out: list[Message] = []
    for _ in range(5):
        out += ch.poll(0.0)
    return out


def test_a_coordinator_skips_replays_of_its_own_and_older_messages(topic: Topic) -> None:
    old = _coordinator()  # an earlier coordinator of the job (epoch 1)
    old.send([Restore(1, None)])
    old.send([JobFailed("the job failed last week")])
    ch = _coordinator()  # this one (epoch 2): it read the history
    ch.send([Restore(2, None)])
    ch.send([Resume(2, {"a": "w1"})])
    ch.send([TriggerCheckpoint(1, 2, 0)])
    ch.send([CheckpointCompleted(1, 2)])
    assert _drain(ch) == [  # its own writes, read back once
        Restore(2, None),
        Resume(2, {"a": "w1"}),
        TriggerCheckpoint(1, 2, 0),
        CheckpointCompleted(1, 2),
    ]
    genuine = list(topic.values)
    # A hostile client copies genuine messages back: its own (the newest and older
    # ones) and its predecessor's, of every type.
    topic.values += [genuine[-1], genuine[-1], genuine[3], genuine[2], genuine[1], genuine[0]]
    assert _drain(ch) == []  # skipped: not a successor
    assert ch._reader is not None and ch._reader.replays.replayed == 6
    ch.send([TriggerCheckpoint(2, 2, 0)])  # and it carries on
    assert _drain(ch) == [TriggerCheckpoint(2, 2, 0)]

    # A successor (a newer epoch, after fencing us) is still noticed.
    successor = _coordinator()
    successor.send([Restore(3, 1)])
    with pytest.raises(CoordinatorFenced, match="another coordinator took over"):
        _drain(ch)
    # The successor, too, skips copies of anything before its own messages.
    assert _drain(successor) == [Restore(3, 1)]
    topic.values += genuine
    assert _drain(successor) == []


def test_a_worker_acts_on_no_replayed_message(topic: Topic) -> None:
    ch = _coordinator()
    ch.send([Restore(1, None)])
    ch.send([Resume(1, {"a": "w1"})])
    worker = ControlClient("localhost:1", "app", key_source=lambda: KEY)
    assert worker.read_to_end(5.0) == [Restore(1, None), Resume(1, {"a": "w1"})]
    ch.send([CheckpointCompleted(1, 1)])
    assert worker.poll(0.0) == [CheckpointCompleted(1, 1)]
    topic.values += list(topic.values)  # every message again
    assert worker.poll(0.0) == [] and worker.poll(0.0) == []
    assert worker.unverified == 3
    ch.send([JobFailed("genuine")])
    assert worker.poll(0.0) == [JobFailed("genuine")]
    # A worker starting now reads the history once, without the copies.
    late = ControlClient("localhost:1", "app", key_source=lambda: KEY)
    assert late.read_to_end(5.0) == [
        Restore(1, None),
        Resume(1, {"a": "w1"}),
        CheckpointCompleted(1, 1),
        JobFailed("genuine"),
    ]
