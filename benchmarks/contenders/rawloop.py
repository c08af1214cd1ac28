"""The consume→produce loop shared by the raw-client contenders: the cheapest correct loop.

Plain confluent-kafka through kstream's client factory: ``consume(num_messages=…)``
batches, one ``produce`` per output record with no per-record callback (the producer
asks for delivery reports only on error, ``delivery.report.only.error``, and one
producer-level callback collects those), ``poll(0)`` per batch to serve them, the
consumer's positions read once per batch for the stop condition, one synchronous
offset commit after the final flush. At-least-once.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from benchmarks.workloads import EndOffsets, Progress, Report
from kstream.kafka.clients import TopicPartition, make_consumer, make_producer

BATCH = 10_000


class Output:
    """How a batch handler produces: ``send(value, key)`` is the producer's own ``produce``
    bound to the output topic (it raises ``BufferError`` when the local queue is full: then
    call ``produce(value, key)``, which serves deliveries and retries)."""

    def __init__(self, producer: Any, topic: str) -> None:
        self.producer = producer
        self.send: Callable[[bytes, bytes | None], None] = functools.partial(
            producer.produce, topic
        )

    def produce(self, value: bytes, key: bytes | None) -> None:
        while True:
            try:
                self.send(value, key)
                return
            except BufferError:
                self.producer.poll(0.05)  # local queue full: serve deliveries, then retry


#: Handles one batch of messages: ``(messages, output) -> records produced``; raises on a
#: message with an error.
BatchHandler = Callable[[list[Any], Output], int]


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
    errors: list[str] = []

    def on_error(err: Any, _msg: Any) -> None:  # called for failed deliveries only
        if err is not None and len(errors) < 5:
            errors.append(str(err))

    producer = make_producer(
        bootstrap,
        extra={
            "linger.ms": 5,
            "batch.num.messages": 10_000,
            "delivery.report.only.error": True,
            "on_delivery": on_error,
        },
    )
    output = Output(producer, output_topic)
    progress = Progress(end)
    parts = [TopicPartition(input_topic, p) for p in sorted(end.ends)]
    consumer.subscribe([input_topic])
    records_in = records_out = 0
    try:
        while not progress.done:
            msgs = consumer.consume(num_messages=BATCH, timeout=0.5)
            if not msgs:
                continue
            if progress.t_first is None:
                progress.t_first = time.time()  # the first input records are in hand
            records_in += len(msgs)
            records_out += handle(msgs, output)
            producer.poll(0)
            # The next offset of each partition after this batch: its last record is
            # position - 1 (one call per batch, no per-record bookkeeping).
            for tp in consumer.position(parts):
                if tp.offset > 0:
                    progress.observe(tp.partition, tp.offset - 1)
        remaining = producer.flush(120.0)
        if remaining or errors:
            raise RuntimeError(f"{name}: {remaining} records undelivered, errors: {errors}")
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert progress.t_first is not None
    return Report(name, records_in, records_out, progress.t_first, time.time())


def consume_error(name: str, msg: Any) -> RuntimeError:
    """The error to raise for a consumed message that carries an error."""
    return RuntimeError(f"{name}: consume error on {msg.topic()}: {msg.error()}")
