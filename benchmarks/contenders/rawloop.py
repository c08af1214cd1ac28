"""The consume→produce loop shared by the raw-client contenders.

Plain confluent-kafka through kstream's client factory: ``consume(num_messages=…)``
batches, one ``produce`` per output record, ``poll(0)`` per batch to serve delivery
reports, one synchronous offset commit after the final flush. At-least-once; no
per-record Python beyond what the batch handler does.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from benchmarks.workloads import EndOffsets, Progress, Report
from kstream.kafka.clients import make_consumer, make_producer

BATCH = 10_000

#: Handles one batch of messages: ``(messages, produce) -> records produced``.
BatchHandler = Callable[[list[Any], Callable[..., None]], int]


def run_raw(
    name: str,
    bootstrap: str,
    input_topic: str,
    output_topic: str,
    group: str,
    end: EndOffsets,
    handle: BatchHandler,
) -> Report:
    """Consume ``input_topic`` up to ``end``, pass each batch to ``handle``, return the report."""
    consumer = make_consumer(
        bootstrap,
        group,
        read_committed=False,
        extra={"fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 8_388_608},
    )
    producer = make_producer(
        bootstrap, extra={"linger.ms": 5, "batch.num.messages": 10_000, "acks": "all"}
    )
    errors: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None and len(errors) < 5:
            errors.append(str(err))

    def produce(value: bytes, key: bytes | None) -> None:
        while True:
            try:
                producer.produce(output_topic, value, key, on_delivery=on_delivery)
                return
            except BufferError:
                producer.poll(0.05)  # local queue full: serve deliveries, then retry

    progress = Progress(end)
    consumer.subscribe([input_topic])
    records_in = records_out = 0
    try:
        while not progress.done:
            msgs = consumer.consume(num_messages=BATCH, timeout=0.5)
            if not msgs:
                continue
            for m in msgs:
                if m.error() is not None:
                    raise RuntimeError(f"{name}: consume error on {input_topic}: {m.error()}")
            records_in += len(msgs)
            records_out += handle(msgs, produce)
            producer.poll(0)
            # Offsets only grow within a partition: the last message of each partition
            # in the batch decides whether that partition is done.
            last: dict[int, int] = {}
            for m in msgs:
                part, off = m.partition(), m.offset()
                if part is not None and off is not None:
                    last[part] = off
            for p, o in last.items():
                progress.observe(p, o)
        remaining = producer.flush(120.0)
        if remaining or errors:
            raise RuntimeError(f"{name}: {remaining} records undelivered, errors: {errors}")
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert progress.t_first is not None
    return Report(name, records_in, records_out, progress.t_first, time.time())
