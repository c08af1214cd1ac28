"""Record format of internal repartition topics: headers, events, validation (no broker)."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError

from kstream.elements.events import Barrier, EndOfInput, StreamEvent, Watermark
from kstream.elements.records import InternalEvent, InternalRecord
from kstream.kafka.delivery import DeliveryFailures, InternalDeliveryError
from kstream.kafka.internal import (
    EventKind,
    InternalRecordError,
    RecordOrigin,
    data_headers,
    decode_event,
    encode_event,
    is_stale,
    produce_event,
    read_origin,
    seq_header,
    time_headers,
)
from kstream.kafka.internal_batch import decode_records


def test_data_headers_name_task_and_attempt() -> None:
    h = data_headers("stage1-3", 7)
    assert h == [("ks.task", b"stage1-3"), ("ks.attempt", b"7")]
    assert read_origin(h) == RecordOrigin("stage1-3", 7, None)


def test_user_headers_are_ignored_by_origin() -> None:
    h = [("trace", b"abc"), *data_headers("s-0", 0), ("other", None)]
    assert read_origin(h) == RecordOrigin("s-0", 0, None)


@pytest.mark.parametrize(
    ("attempt", "event", "kind", "value"),
    [
        (
            2,
            Barrier(9, 2, 1_700_000_000_000),
            EventKind.BARRIER,
            b'{"v":1,"attempt":2,"checkpoint_id":9,"timestamp":1700000000000}',
        ),
        (2, Watermark(5), EventKind.WATERMARK, b'{"v":1,"attempt":2,"timestamp":5}'),
        (
            2,
            Watermark(5, judged=9),
            EventKind.WATERMARK,
            b'{"v":1,"attempt":2,"timestamp":5,"judged":9}',
        ),
        (0, EndOfInput(), EventKind.END_OF_INPUT, b'{"v":1,"attempt":0}'),
    ],
)
def test_events_encode_and_decode_exactly(
    attempt: int, event: StreamEvent, kind: EventKind, value: bytes
) -> None:
    headers, encoded = encode_event("s-1", attempt, event)
    assert encoded == value
    assert headers == [
        ("ks.task", b"s-1"),
        ("ks.attempt", str(attempt).encode()),
        ("ks.event", kind.value.encode()),
    ]
    origin = read_origin(headers)
    assert origin.event is kind
    assert decode_event(origin, encoded) == event


def test_records_decode_into_the_runtimes_items_and_malformed_ones_are_named() -> None:
    headers, value = encode_event("s-1", 2, Barrier(9, 2, 7))
    records: list[tuple[bytes | None, bytes | None, int | None, int, Any]] = [
        (b"k", b"v", 5, 10, data_headers("s-0", 2)),
        (None, value, 6, 11, headers),
        (b"k", b"v", 7, 12, [("ks.task", b"s-0")]),
    ]
    items, bad = decode_records(records)
    assert items == [
        InternalRecord("s-0", 2, 10, b"k", b"v", 5),
        InternalEvent("s-1", 2, 11, Barrier(9, 2, 7)),
    ]
    assert bad == [(2, "malformed internal record: internal record lacks ks.task/ks.attempt "
                       "headers (has ['ks.task']): not written by a kstream task")]  # fmt: skip


def test_an_event_time_the_kafka_timestamp_cannot_carry_travels_in_a_header() -> None:
    # librdkafka writes a timestamp of 0 as "now": the reader takes ks.time instead.
    at_zero = time_headers(data_headers("s-0", 2), 0)
    assert at_zero == [("ks.task", b"s-0"), ("ks.attempt", b"2"), ("ks.time", b"0")]
    assert read_origin(at_zero) == RecordOrigin("s-0", 2, None, 0)
    before = time_headers(data_headers("s-0", 2), -1500)
    items, bad = decode_records(
        [
            (b"a", b"v", 1_796_000_000_000, 10, at_zero),
            (b"b", b"v", 1_796_000_000_000, 11, before),
            (b"c", b"v", 7, 12, data_headers("s-0", 2)),
        ]
    )
    assert bad == []
    assert [(r.key, r.timestamp) for r in items if isinstance(r, InternalRecord)] == [
        (b"a", 0),
        (b"b", -1500),
        (b"c", 7),
    ]


def test_only_barriers_require_pipelined_execution() -> None:
    assert [k for k in EventKind if k.requires_pipelined] == [
        EventKind.BARRIER,
        EventKind.BARRIERS,
    ]  # (a set of watermarks does not)


def test_event_fields_must_match_the_kind() -> None:
    def origin(kind: EventKind) -> RecordOrigin:
        return RecordOrigin("s-1", 0, kind)

    with pytest.raises(InternalRecordError, match="barrier event needs a checkpoint_id"):
        decode_event(origin(EventKind.BARRIER), b'{"v":1,"attempt":0,"timestamp":1}')
    with pytest.raises(InternalRecordError, match="watermark event must not have a checkpoint_id"):
        decode_event(
            origin(EventKind.WATERMARK), b'{"v":1,"attempt":0,"checkpoint_id":1,"timestamp":1}'
        )
    with pytest.raises(InternalRecordError, match="end_of_input event must not have a timestamp"):
        decode_event(origin(EventKind.END_OF_INPUT), b'{"v":1,"attempt":0,"timestamp":1}')
    with pytest.raises(InternalRecordError, match="attempt must be >= 0"):
        data_headers("s-1", -1)


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        (None, "lacks ks.task/ks.attempt headers"),
        ([("ks.task", b"s-1")], "lacks ks.task/ks.attempt"),
        ([("ks.task", b"s-1"), ("ks.attempt", b"-1")], "non-negative decimal"),
        ([("ks.task", b"s-1"), ("ks.attempt", b"1e3")], "non-negative decimal"),
        ([("ks.task", b"s-1"), ("ks.attempt", b"\xff")], "not UTF-8"),
        ([("ks.task", None), ("ks.attempt", b"1")], "ks.task has no value"),
        ([("ks.task", b""), ("ks.attempt", b"1")], "task id must be"),
        ([("ks.task", b"a"), ("ks.task", b"b"), ("ks.attempt", b"1")], "appears more than once"),
        ([("ks.task", b"a"), ("ks.attempt", b"1"), ("ks.event", b"exec")], "unknown event kind"),
        ([("ks.task", b"a"), ("ks.attempt", b"1"), ("ks.time", b"1.5")], "64-bit decimal"),
        ([("ks.task", b"a"), ("ks.attempt", b"1"), ("ks.time", b"-")], "64-bit decimal"),
        ([("ks.task", b"a"), ("ks.attempt", b"1"), ("ks.time", b"9" * 19)], "64-bit decimal"),
        ([("ks.task", b"a"), ("ks.attempt", b"1"), ("ks.time", None)], "ks.time has no value"),
        ([("ks.task", b"a"), ("ks.attempt", b"1"), ("ks.seq", b"3")], "come together"),
        ([("ks.task", b"a"), ("ks.attempt", b"1"), ("ks.writer", b"w")], "come together"),
        ([*data_headers("a", 1, "w"), ("ks.seq", b"-3")], "non-negative decimal"),
        ([*data_headers("a", 1, "w"), ("ks.seq", b"3"), ("ks.seq", b"4")], "more than once"),
        ([*data_headers("a", 1), ("ks.writer", b"w" * 65), ("ks.seq", b"3")], "writer id must"),
        ([*data_headers("a", 1), ("ks.writer", "é".encode()), ("ks.seq", b"3")], "writer id must"),
    ],
)
def test_malformed_headers_are_rejected_clearly(headers: Any, message: str) -> None:
    with pytest.raises(InternalRecordError, match=message):
        read_origin(headers)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "1..4096 bytes"),
        (b"x" * 5000, "1..4096 bytes"),
        (b"{not json", "not JSON"),
        (b"[1]", "object with v=1"),
        (b'{"v":2,"attempt":3}', "object with v=1"),
        (b'{"v":1,"attempt":4,"checkpoint_id":1,"timestamp":1}', "disagrees with header 3"),
        (b'{"v":1,"attempt":3,"checkpoint_id":"1","timestamp":1}', "checkpoint_id must be"),
        (b'{"v":1,"attempt":3,"checkpoint_id":true,"timestamp":1}', "checkpoint_id must be"),
        (b'{"v":1,"attempt":3,"timestamp":1}', "barrier event needs a checkpoint_id"),
    ],
)
def test_malformed_event_values_are_rejected_clearly(value: bytes | None, message: str) -> None:
    origin = RecordOrigin("s-1", 3, EventKind.BARRIER)
    with pytest.raises(InternalRecordError, match=message):
        decode_event(origin, value)


def test_a_watermark_judged_field_must_be_an_integer() -> None:
    origin = RecordOrigin("s-1", 3, EventKind.WATERMARK)
    with pytest.raises(InternalRecordError, match="judged must be an integer"):
        decode_event(origin, b'{"v":1,"attempt":3,"timestamp":1,"judged":"9"}')


def test_decode_event_refuses_data_records() -> None:
    with pytest.raises(InternalRecordError, match="data record, not an event"):
        decode_event(RecordOrigin("s-1", 0, None), b"{}")


def test_stale_attempts() -> None:
    assert [is_stale(a, 3) for a in (0, 2, 3, 4)] == [True, True, False, False]


class FakeProducer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, int, bytes | None, bytes | None, Any]] = []
        self.polls = 0

    def produce(
        self, topic: str, value: bytes | None = None, key: bytes | None = None, **kw: Any
    ) -> None:
        self.sent.append((topic, kw["partition"], key, value, kw["headers"]))

    def poll(self, timeout: float = 0) -> int:
        self.polls += 1
        return 0


def test_a_writer_numbers_its_records_and_the_reader_gets_the_numbers() -> None:
    h = [*data_headers("s-0", 2, "5a1e"), seq_header(41)]
    assert read_origin(h) == RecordOrigin("s-0", 2, None, writer="5a1e", seq=41)
    headers, value = encode_event("s-0", 2, Watermark(5), "5a1e")
    items, bad = decode_records(
        [(b"k", b"v", 5, 10, h), (None, value, 5, 11, [*headers, seq_header(42)])]
    )
    assert bad == []
    assert items == [
        InternalRecord("s-0", 2, 10, b"k", b"v", 5, "5a1e", 41),
        InternalEvent("s-0", 2, 11, Watermark(5), "5a1e", 42),
    ]


def test_a_writers_event_takes_the_next_number_on_each_partition() -> None:
    p = FakeProducer()
    seqs = [4, 0, 9]
    produce_event(p, "app.s.repartition", 3, "s-2", 1, Watermark(42), writer="w", seqs=seqs)
    assert [read_origin(h).seq for *_, h in p.sent] == [4, 0, 9]
    assert seqs == [5, 1, 10]
    with pytest.raises(ValueError, match="sequence numbers"):
        produce_event(p, "t", 1, "s-2", 1, Watermark(42), writer="w")


def test_produce_event_writes_every_partition() -> None:
    p = FakeProducer()
    ev = Watermark(42)
    produce_event(p, "app.s.repartition", 3, "s-2", 1, ev)
    headers, value = encode_event("s-2", 1, ev)
    assert p.sent == [("app.s.repartition", i, None, value, headers) for i in range(3)]
    assert p.polls == 1
    with pytest.raises(ValueError, match="at least one partition"):
        produce_event(p, "t", 0, "s-2", 1, ev)


# ---- failed deliveries of internal records (the real broker: integration/test_internal_delivery.py)


class _Sent:
    """What a delivery report names: the record's topic and partition."""

    def __init__(self, topic: str, partition: int) -> None:
        self._topic, self._partition = topic, partition

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition


TOO_LARGE = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)


def test_delivered_records_are_not_failures() -> None:
    failures = DeliveryFailures()
    failures.of(2)(None, _Sent("app.s.repartition", 0))
    failures.check(2)
    assert failures.failed == {}


def test_a_failed_delivery_fails_its_attempt_with_the_topic_and_the_reason() -> None:
    failures = DeliveryFailures()
    failures.of(2)(TOO_LARGE, _Sent("app.s.repartition", 1))
    failures.of(2)(TOO_LARGE, _Sent("app.s.repartition", 0))
    for attempt in (0, 1, 2):  # found by whoever looks, in that attempt or an earlier view
        with pytest.raises(InternalDeliveryError) as e:
            failures.check(attempt)
        assert str(e.value).startswith(
            "delivery to app.s.repartition [1] failed: MSG_SIZE_TOO_LARGE: "
        )
        assert "(2 record(s))" in str(e.value)


def test_a_restored_attempt_forgets_the_failures_of_earlier_attempts() -> None:
    failures = DeliveryFailures()
    old = failures.of(2)
    old(TOO_LARGE, _Sent("app.s.repartition", 0))
    failures.check(3)  # attempt 3 replays them: their loss is not its
    assert failures.failed == {}
    old(TOO_LARGE, _Sent("app.s.repartition", 0))  # a late report of attempt 2's
    failures.check(3)
    failures.of(3)(TOO_LARGE, _Sent("app.s.repartition", 0))
    with pytest.raises(InternalDeliveryError, match=r"\(1 record\(s\)\)"):
        failures.check(3)
