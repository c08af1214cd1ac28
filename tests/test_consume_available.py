"""kstream.kafka.clients.consume_available: what is queued now, else the first message
to arrive, never librdkafka's wait for a full batch.

The consumer is a stand-in with librdkafka's documented timing (``consume(n, t)``
returns once ``n`` messages are there or ``t`` has passed; ``poll(t)`` returns the
first message): what is checked is which calls the helper makes and with what
timeouts. The real consumer is exercised by every integration test that reads the
control topic or a source (the coordinator's acknowledgements among them).
"""

from __future__ import annotations

from typing import Any, cast

from kstream.kafka.clients import consume_available as _consume_available


def consume_available(consumer: ScriptedConsumer, n: int, timeout: float) -> list[Any]:
    return _consume_available(cast(Any, consumer), n, timeout)


class ScriptedConsumer:
    """``queued`` is what is there now; ``arrives`` what comes during a wait."""

    def __init__(self, queued: list[str], arrives: list[str]) -> None:
        self.queued, self.arrives = list(queued), list(arrives)
        self.calls: list[tuple[str, int | None, float]] = []

    def consume(self, n: int, timeout: float) -> list[str]:
        self.calls.append(("consume", n, timeout))
        if timeout > 0:  # librdkafka: waits until n are there or the timeout passed
            self.queued += self.arrives
            self.arrives = []
        out, self.queued = self.queued[:n], self.queued[n:]
        return out

    def poll(self, timeout: float) -> str | None:
        self.calls.append(("poll", None, timeout))
        if timeout > 0:
            self.queued += self.arrives
            self.arrives = []
        return self.queued.pop(0) if self.queued else None


def test_what_is_queued_is_returned_without_waiting() -> None:
    c = ScriptedConsumer(["a", "b"], ["late"])
    assert consume_available(c, 500, 0.05) == ["a", "b"]
    assert c.calls == [("consume", 500, 0)]


def test_an_empty_queue_is_waited_for_until_its_first_message_only() -> None:
    c = ScriptedConsumer([], ["a", "b", "c"])
    assert consume_available(c, 2, 0.05) == ["a", "b"]
    assert c.calls == [("consume", 2, 0), ("poll", None, 0.05), ("consume", 1, 0)]
    assert consume_available(c, 1, 0.05) == ["c"]  # a batch of one: no second consume
    assert c.calls[-1] == ("consume", 1, 0)


def test_nothing_arriving_returns_nothing_and_no_timeout_never_waits() -> None:
    c = ScriptedConsumer([], [])
    assert consume_available(c, 500, 0.05) == []
    assert [name for name, _n, _t in c.calls] == ["consume", "poll"]
    c = ScriptedConsumer([], ["a"])
    assert consume_available(c, 500, 0) == []
    assert c.calls == [("consume", 500, 0), ("poll", None, 0)]  # both without waiting
