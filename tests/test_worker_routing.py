"""The router's wait for internal deliveries before acknowledgements (no broker: a
producer's flush reports how many records are still undelivered)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import pytest
from confluent_kafka import KafkaError

from kstream.config import OnBadRecord
from kstream.elements.events import Barrier
from kstream.elements.records import InternalRecord, OutputBatch, OutputEvent
from kstream.kafka.delivery import InternalDeliveryError
from kstream.kafka.dlq import DeadLetterWriter
from kstream.kafka.internal import data_headers, read_origin
from kstream.kafka.internal_batch import decode_records
from kstream.worker.routing import ACK_WAIT_BEHIND_S, ACK_WAIT_S, Router, TaskRoute


class _Producer:
    """``flush(timeout)`` returns the next of ``left`` (records still undelivered) after
    ``report`` (flush serves the delivery reports)."""

    def __init__(self, *left: int, report: Callable[[], None] | None = None) -> None:
        self.left = list(left)
        self.report = report
        self.timeouts: list[float | None] = []

    def flush(self, timeout: float | None = None) -> int:
        self.timeouts.append(timeout)
        if self.report is not None:
            self.report()
        return self.left.pop(0)


def _router(producer: Any) -> Router:
    dlq = DeadLetterWriter("app", "127.0.0.1:1", OnBadRecord.FAIL)
    return Router(producer, dlq, {"app.s.repartition": 1})


def test_acknowledgements_wait_briefly_then_longer_while_deliveries_lag() -> None:
    p = _Producer(0, 3, 2, 0, 0)
    r = _router(p)
    assert [r.internal_delivered(1) for _ in range(5)] == [True, False, False, True, True]
    assert p.timeouts == [ACK_WAIT_S, ACK_WAIT_S, ACK_WAIT_BEHIND_S, ACK_WAIT_BEHIND_S, ACK_WAIT_S]


class _Sent:
    def __init__(self, partition: int = 0) -> None:
        self._partition = partition

    def topic(self) -> str:
        return "app.s.repartition"

    def partition(self) -> int:
        return self._partition


TOO_LARGE = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)


def test_a_refused_record_of_the_attempt_raises_instead_of_acknowledging() -> None:
    r = _router(_Producer(0, 0))
    r.failures.of(1)(TOO_LARGE, _Sent())
    with pytest.raises(InternalDeliveryError, match="MSG_SIZE_TOO_LARGE"):
        r.internal_delivered(1)
    assert r.internal_delivered(2)  # restored in attempt 2: attempt 1's records are stale


def test_flush_internal_waits_for_every_delivery_then_reports_refused_records() -> None:
    p = _Producer(0)
    _router(p).flush_internal()
    assert p.timeouts == [None]  # no timeout: message.timeout.ms bounds it
    refused = _Producer(0)
    r = _router(refused)
    refused.report = lambda: r.failures.of(0)(TOO_LARGE, _Sent(2))
    with pytest.raises(InternalDeliveryError, match=r"repartition \[2\] failed: MSG_SIZE"):
        r.flush_internal()
    assert refused.timeouts == [None]


class _Recorder:
    """A producer that keeps what it was given to write."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def produce(self, topic: str, value: bytes, key: bytes, **kw: Any) -> None:
        self.records.append({"topic": topic, "key": key, **kw})

    def poll(self, timeout: float) -> int:
        return 0


def test_an_event_time_of_zero_reaches_the_next_stage_through_a_header() -> None:
    p = _Recorder()
    route = TaskRoute("s-0", 3)
    batch = OutputBatch("app.s.repartition", True, [0, 0], [b"a", b"b"], [b"1", b"2"], [5, 0])
    _router(p).route(route, [batch])
    first, second = p.records
    seq0, seq1 = ("ks.seq", b"0"), ("ks.seq", b"1")
    assert (first["timestamp"], first["headers"]) == (5, [*route.headers, seq0])
    assert (second["timestamp"], second["headers"]) == (
        0,
        [*route.headers, seq1, ("ks.time", b"0")],
    )
    # The broker stamps the second "now" (librdkafka's reading of 0); the reader recovers 0.
    read = [(r["key"], b"v", 1_796_000_000_000 if r["timestamp"] == 0 else r["timestamp"], i,
             r["headers"]) for i, r in enumerate(p.records)]  # fmt: skip
    items, _ = decode_records(read)
    assert [(r.key, r.timestamp) for r in items if isinstance(r, InternalRecord)] == [
        (b"a", 5),
        (b"b", 0),
    ]


@pytest.mark.parametrize("event_sets", [False, True])
def test_a_tasks_records_and_events_are_numbered_per_partition_by_its_writer(
    event_sets: bool,
) -> None:
    p = _Recorder()
    router = Router(
        cast(Any, p),
        DeadLetterWriter("app", "127.0.0.1:1", OnBadRecord.FAIL),
        {"app.r": 2},
        event_sets=event_sets,
    )
    route = TaskRoute("s-0", 3)
    assert route.headers == data_headers("s-0", 3, route.writer)
    assert TaskRoute("s-0", 3).writer != route.writer  # each incarnation its own
    batch = OutputBatch("app.r", True, [0, 1, 0], [b"a", b"b", b"c"], [b"1"] * 3, [5, 6, 7])
    router.route(route, [batch, OutputEvent("app.r", True, Barrier(1, 3, 7)), batch])
    numbered = [
        (r["partition"], read_origin(r["headers"]).seq, read_origin(r["headers"]).writer)
        for r in p.records
    ]
    if not event_sets:
        assert [(part, seq) for part, seq, _ in numbered] == [
            (0, 0), (1, 0), (0, 1),  # the batch
            (0, 2), (1, 1),  # the barrier, on each partition
            (0, 3), (1, 2), (0, 4),
        ]  # fmt: skip
        assert {w for _, _, w in numbered} == {route.writer}
        return
    # The barrier goes out in the worker's barrier-set record, numbered by the set's own
    # writer, before the task's next record on the topic.
    assert router.sets is not None
    sets = router.sets.writer
    assert numbered == [
        (0, 0, route.writer), (1, 0, route.writer), (0, 1, route.writer),  # the batch
        (0, 0, sets), (1, 0, sets),  # the barrier set, on each partition
        (0, 2, route.writer), (1, 1, route.writer), (0, 3, route.writer),
    ]  # fmt: skip


class _SmallQueue(_Recorder):
    """A producer whose local queue holds ``room`` records; ``poll`` delivers them all."""

    def __init__(self, room: int) -> None:
        super().__init__()
        self.room, self.queued, self.polls = room, 0, 0

    def produce(self, topic: str, value: bytes, key: bytes, **kw: Any) -> None:
        if self.queued >= self.room:
            raise BufferError("Local: Queue full")
        self.queued += 1
        super().produce(topic, value, key, **kw)

    def poll(self, timeout: float) -> int:
        self.polls += 1
        delivered, self.queued = self.queued, 0
        return delivered


def test_a_barrier_to_more_partitions_than_the_queue_holds_waits_for_deliveries() -> None:
    # A checkpoint's barriers go to every partition from every upstream task of the
    # worker at once (P_up x P_down records): a full local queue is waited out, never
    # a task failure (1024 partitions: BufferError in every task, benchmarks/SCALING.md).
    p = _SmallQueue(room=3)
    router = Router(
        cast(Any, p), DeadLetterWriter("app", "127.0.0.1:1", OnBadRecord.FAIL), {"app.r": 10}
    )
    route = TaskRoute("s-0", 1)
    router.route(route, [OutputEvent("app.r", True, Barrier(7, 1, 0))])
    router.write_sets()
    assert [r["partition"] for r in p.records] == list(range(10))
    assert [dict(r["headers"])["ks.seq"] for r in p.records] == [b"0"] * 10
    assert p.polls >= 3  # each full queue served its deliveries before the next record
