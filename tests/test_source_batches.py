"""SourceConsumer.consume_batch groups records by partition, in offset order, whatever
the order in which the client interleaves partitions and errors."""

from __future__ import annotations

from typing import Any

from kstream.kafka.clients import KafkaError
from kstream.kafka.missingtopics import MissingTopics
from kstream.kafka.source import SourceConsumer

TIMESTAMP_NOT_AVAILABLE, TIMESTAMP_CREATE_TIME = 0, 1  # confluent-kafka's timestamp types


class Err:
    def __init__(self, code: int) -> None:
        self._code = code

    def code(self) -> int:
        return self._code

    def fatal(self) -> bool:
        return False


class Msg:
    def __init__(self, topic: str, partition: int, offset: int, err: int | None = None) -> None:
        self.t, self.p, self.o, self.err = topic, partition, offset, err

    def error(self) -> Err | None:
        return None if self.err is None else Err(self.err)

    def topic(self) -> str:
        return self.t

    def partition(self) -> int:
        return self.p

    def offset(self) -> int:
        return self.o

    def key(self) -> bytes:
        return f"k{self.o}".encode()

    def value(self) -> bytes:
        return f"{self.t}/{self.p}/{self.o}".encode()

    def timestamp(self) -> tuple[int, int]:
        if self.o == 3:
            return TIMESTAMP_NOT_AVAILABLE, -1
        return TIMESTAMP_CREATE_TIME, 1000 + self.o

    def headers(self) -> None:
        return None


class FakeConsumer:
    def __init__(self, msgs: list[Msg]) -> None:
        self.msgs = msgs

    def consume(self, n: int, timeout: float) -> list[Msg]:
        out, self.msgs = self.msgs[:n], self.msgs[n:]
        return out


def _source(msgs: list[Msg]) -> SourceConsumer:
    s = SourceConsumer.__new__(SourceConsumer)  # a fake client instead of a consumer
    s.cooperative = False
    s.group_id, s.reach, s._reported = "g", None, set()
    s._missing = MissingTopics(60.0)
    s._consumer = FakeConsumer(msgs)
    return s


def test_records_are_grouped_by_partition_in_order_across_interleaving() -> None:
    eof = KafkaError._PARTITION_EOF
    order = [("a", 0, 1), ("a", 0, 2), ("a", 1, 1), ("b", 0, 1), ("a", 0, 3), ("b", 0, 2)]
    msgs = [Msg(*order[0]), Msg(*order[1]), Msg("a", 1, 0, err=eof), *[Msg(*x) for x in order[2:]]]
    msgs.append(Msg("a", 1, 2))
    got: dict[Any, Any] = _source(msgs).consume_batch(100, 0.0)
    assert got == {
        ("a", 0): [
            (b"k1", b"a/0/1", 1001, 1, None),
            (b"k2", b"a/0/2", 1002, 2, None),
            (b"k3", b"a/0/3", None, 3, None),
        ],
        ("a", 1): [(b"k1", b"a/1/1", 1001, 1, None), (b"k2", b"a/1/2", 1002, 2, None)],
        ("b", 0): [(b"k1", b"b/0/1", 1001, 1, None), (b"k2", b"b/0/2", 1002, 2, None)],
    }
    assert list(got) == [("a", 0), ("a", 1), ("b", 0)]
