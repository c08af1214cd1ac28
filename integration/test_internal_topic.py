"""Internal repartition topic on a real broker: data headers and events on every partition."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from integration.edge_tools import read_all
from kstream.elements.events import Barrier, EndOfInput, Watermark
from kstream.kafka.clients import AdminClient, TopicSpec, ensure_topics, make_producer
from kstream.kafka.internal import (
    RecordOrigin,
    data_headers,
    decode_event,
    produce_event,
    read_origin,
)

pytestmark = pytest.mark.integration


def test_events_reach_every_partition_after_the_data(
    kafka_bootstrap: str, kafka_admin: AdminClient, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("app.stage1.repartition")
    ensure_topics(kafka_admin, [TopicSpec(topic, 3)])
    producer = make_producer(kafka_bootstrap)
    headers: list[tuple[str, str | bytes | None]] = list(data_headers("stage0-1", 4))
    for p in range(3):
        producer.produce(topic, value=f"d{p}".encode(), key=b"k", partition=p, headers=headers)
    barrier, watermark, end = Barrier(11, 4, 1_234), Watermark(1_500), EndOfInput()
    for ev in (barrier, watermark, end):
        produce_event(producer, topic, 3, "stage0-1", 4, ev)
    assert producer.flush(20.0) == 0

    got = read_all(kafka_bootstrap, topic)
    by_partition: dict[int, list[object]] = {}
    for r in got:
        origin = read_origin(r.headers)
        item = decode_event(origin, r.value) if origin.event is not None else (origin, r.value)
        by_partition.setdefault(r.partition, []).append(item)
    data_origin = RecordOrigin("stage0-1", 4, None)
    assert by_partition == {
        p: [(data_origin, f"d{p}".encode()), barrier, watermark, end] for p in range(3)
    }
