"""The sinks' batch produce: the client's positional call where its layout is the one
expected, the keyword call otherwise; the same records, keys, timestamps and callback."""

from __future__ import annotations

from typing import Any

from kstream.kafka.clients import make_producer
from kstream.kafka.sink import ColumnBatch, produce_batch


class Recording:
    """The client's produce, counting the calls that passed keywords."""

    def __init__(self, producer: Any) -> None:
        self.producer, self.keyword_calls = producer, 0

    def produce(self, *args: Any, **kw: Any) -> None:
        self.keyword_calls += bool(kw)
        self.producer.produce(*args, **kw)

    def poll(self, timeout: float) -> int:
        return int(self.producer.poll(timeout))


def test_a_real_client_queues_every_record_with_the_delivery_callback() -> None:
    producer = make_producer("127.0.0.1:9", extra={"log_level": 0})  # nothing listens
    delivered: list[tuple[bytes | None, bytes | None]] = []

    def on_delivery(err: Any, msg: Any) -> None:
        delivered.append((msg.key(), msg.value()))

    keys: list[bytes | None] = [b"k0", None, b"k2"]
    values: list[bytes | None] = [b"v0", b"v1", None]
    calls = Recording(producer)
    produce_batch(calls, ColumnBatch("t", keys, values, [1, 2, 3]), 0, on_delivery)
    assert calls.keyword_calls == 0  # the client took the positional call
    producer.purge(in_queue=True)  # each queued record is reported, failed, to the callback
    producer.flush(5.0)  # serves the reports (returns once none is left)
    assert delivered == list(zip(keys, values, strict=True))


class KeywordsOnly:
    """A producer whose produce takes its options by keyword only (any other layout)."""

    def __init__(self) -> None:
        self.sent: list[tuple[Any, ...]] = []
        self.calls = 0

    def produce(self, topic: str, value: Any = None, key: Any = None, **kw: Any) -> None:
        self.calls += 1
        self.sent.append((topic, key, value, kw["timestamp"], kw["on_delivery"]))

    def poll(self, timeout: float) -> int:
        return 0


def test_a_client_with_another_layout_gets_keywords() -> None:
    p = KeywordsOnly()
    produce_batch(p, ColumnBatch("t", [b"a", b"b"], [b"1", b"2"], [10, 20]), 0, print)
    assert p.sent == [("t", b"a", b"1", 10, print), ("t", b"b", b"2", 20, print)]
    assert p.calls == 2  # the refused positional call queued nothing
