"""At-least-once sink on a real broker: eager produce, flush at the barrier, failures raise."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from integration.edge_tools import read_all
from kstream.kafka.clients import AdminClient, TopicSpec, ensure_topics, make_producer
from kstream.kafka.sink import AtLeastOnceSink, SinkDeliveryError

pytestmark = pytest.mark.integration


def test_records_are_visible_after_the_barrier_flush(
    kafka_bootstrap: str, kafka_admin: AdminClient, unique_name: Callable[[str], str]
) -> None:
    out = unique_name("alo")
    ensure_topics(kafka_admin, [TopicSpec(out, 2)])
    sink = AtLeastOnceSink("sink-0", kafka_bootstrap, timeout=20.0)
    try:
        assert sink.recover(None, attempt=1) == 0
        sink.write_batch(
            (out, i % 2, f"k{i}".encode(), f"v{i}".encode(), 5_000 + i, None) for i in range(40)
        )
        sink.write((out, 0, b"last", None, None, [("h", b"1")]))
        sink.on_barrier(1)
        assert sink.buffer_blob() is None
        assert sink.on_checkpoint_completed(1) == 0
    finally:
        sink.close()
    got = read_all(kafka_bootstrap, out)
    assert len(got) == 41
    keys = [r.key for r in got if r.partition == 1]
    assert None not in keys
    assert sorted(k for k in keys if k is not None) == sorted(
        f"k{i}".encode() for i in range(1, 40, 2)
    )
    last = [r for r in got if r.key == b"last"]
    assert [(r.partition, r.value, r.headers) for r in last] == [(0, None, [("h", b"1")])]


def test_a_failed_delivery_raises_at_the_barrier(
    kafka_bootstrap: str, kafka_admin: AdminClient, unique_name: Callable[[str], str]
) -> None:
    out = unique_name("alo-bad")
    ensure_topics(kafka_admin, [TopicSpec(out, 1)])
    sink = AtLeastOnceSink("sink-0", kafka_bootstrap, timeout=20.0)
    try:
        sink.write((out, 0, b"ok", b"1", None, None))
        sink.write((out, 7, b"nowhere", b"2", None, None))  # partition 7 does not exist
        with pytest.raises(SinkDeliveryError, match=r"1 records failed and 0 still undelivered"):
            sink.on_barrier(3)
        sink.on_barrier(4)  # the error was reported once; the sink goes on
    finally:
        sink.close()
    assert [r.key for r in read_all(kafka_bootstrap, out)] == [b"ok"]


def test_sinks_sharing_the_workers_producer_each_see_only_their_own_failures(
    kafka_bootstrap: str, kafka_admin: AdminClient, unique_name: Callable[[str], str]
) -> None:
    """A worker's at-least-once sink tasks write through its one producer: both outputs
    arrive, and a failed delivery is the failing task's, not its neighbour's."""
    out = unique_name("alo-shared")
    ensure_topics(kafka_admin, [TopicSpec(out, 1)])
    shared = make_producer(kafka_bootstrap, extra={"delivery.report.only.error": True})
    good = AtLeastOnceSink("sink-0", producer=shared, timeout=20.0)
    bad = AtLeastOnceSink("sink-1", producer=shared, timeout=20.0)
    good.write_batch([(out, 0, b"g1", b"1", None, None), (out, 0, b"g2", b"2", None, None)])
    bad.write((out, 0, b"b1", b"3", None, None))
    bad.write((out, 5, b"nowhere", b"4", None, None))  # partition 5 does not exist
    good.on_barrier(1)  # flushes the shared producer; its own records all delivered
    with pytest.raises(SinkDeliveryError, match=r"sink sink-1 at barrier 1: 1 records failed"):
        bad.on_barrier(1)
    good.close()
    bad.close()
    assert sorted(r.key for r in read_all(kafka_bootstrap, out) if r.key) == [b"b1", b"g1", b"g2"]


def test_a_sink_needs_a_producer_or_an_address() -> None:
    with pytest.raises(ValueError, match="needs a producer or a bootstrap address"):
        AtLeastOnceSink("sink-0")
