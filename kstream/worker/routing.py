"""Where a task's drained outputs go, in order: internal topics, sinks, dead letters,
declined checkpoints (docs/design.md §2, §7)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kstream.config import Guarantee
from kstream.elements.events import Barrier, Watermark
from kstream.elements.records import AlignmentAborted, DeadLetter, Output, OutputBatch, OutputEvent
from kstream.kafka.clients import Producer, produce_with_retry
from kstream.kafka.delivery import DeliveryFailures
from kstream.kafka.dlq import DeadLetterWriter
from kstream.kafka.internal import (
    data_headers,
    encode_event,
    new_writer,
    produce_event,
    produce_on,
    seq_header,
    time_headers,
)
from kstream.kafka.sink import Sink
from kstream.metrics.worker import WorkerMetrics
from kstream.protocol.messages import DeclineCheckpoint, Message
from kstream.worker.eventsets import EventSets


@dataclass
class TaskRoute:
    """What routing needs of one task: who writes (its id, attempt, this incarnation's
    writer id and the record headers naming them; the next sequence number on each
    internal partition) and its sinks by guarantee, with the guarantee of each sink topic."""

    task_id: str
    attempt: int
    sinks: dict[Guarantee, Sink] = field(default_factory=dict)
    sink_topics: dict[str, Guarantee] = field(default_factory=dict)
    writer: str = field(default_factory=new_writer)
    headers: list[Any] = field(init=False)
    seqs: dict[str, list[int]] = field(default_factory=dict)  # per internal topic

    def __post_init__(self) -> None:
        self.headers = data_headers(self.task_id, self.attempt, self.writer)


# How long an iteration waits for internal deliveries when acknowledgements are due;
# after a wait that did not see them all, the next waits longer (with more output
# queued than the broker takes in one short wait, short waits alone would never see
# the queue empty).
ACK_WAIT_S = 0.05
ACK_WAIT_BEHIND_S = 1.0


class QueueFullWaits:
    """``producer`` for ``produce_event``: a full local queue is waited out (its
    deliveries served, then the record queued again), never an error. An event goes to
    every partition of its topic: written per task, a checkpoint's barriers were
    P_up x P_down records at once (at 1024 partitions on 4 workers, 262 144 from each
    worker in one loop iteration, past librdkafka's default queue of 100 000 records:
    every task failed the checkpoint with BufferError, benchmarks/SCALING.md); the
    worker's event sets still write P_down records at once."""

    def __init__(self, producer: Producer) -> None:
        self._producer = producer

    def produce(self, topic: str, value: Any = None, key: Any = None, **kwargs: Any) -> None:
        try:
            self._producer.produce(topic, value, key, **kwargs)
        except BufferError:  # local queue full
            produce_with_retry(self._producer, topic, value, key, full=True, **kwargs)

    def poll(self, timeout: float) -> int:
        return int(self._producer.poll(timeout))


class Router:
    """Writes the outputs of this worker's tasks: one producer for every internal topic,
    each task's own sinks, the dead-letter writer, and declines to the coordinator."""

    def __init__(
        self,
        producer: Producer,
        dlq: DeadLetterWriter,
        internal_partitions: dict[str, int],
        send: Callable[[Message], object] | None = None,
        metrics: WorkerMetrics | None = None,
        *,
        event_sets: bool = True,
    ) -> None:
        self.metrics = metrics or WorkerMetrics()
        self.producer = producer
        self._events = QueueFullWaits(producer)
        # the producer's failed deliveries (each record's delivery callback)
        self.failures = DeliveryFailures()
        self._behind = False  # the last ``internal_delivered`` saw records undelivered
        self.dlq = dlq
        self.internal_partitions = internal_partitions
        self.send = send  # None without a coordinator: nothing to decline to
        # Barriers and watermarks of the worker's tasks, one record per partition for
        # many tasks (None: a record per task and partition, as earlier workers wrote).
        self.sets = (
            EventSets(self._events, internal_partitions, self.failures.of) if event_sets else None
        )

    def route(self, task: TaskRoute, outputs: list[Output]) -> None:
        """Write a task's drained outputs in order."""
        for out in outputs:
            if isinstance(out, OutputBatch):
                self.metrics.records_out(task.task_id, out.topic, len(out.keys))
                if out.internal:
                    self._produce_internal(task, out)
                else:
                    g = task.sink_topics[out.topic]
                    # the batch's own lists: the task never touches a drained batch again
                    task.sinks[g].write_columns(out.topic, out.keys, out.values, out.timestamps)
            elif isinstance(out, OutputEvent):
                sets, event = self.sets, out.event
                if out.internal and sets is not None:
                    if isinstance(event, Barrier):
                        sets.barrier(out.topic, task.task_id, task.attempt, event)
                        continue
                    if isinstance(event, Watermark):
                        sets.watermark(out.topic, task.task_id, task.attempt, event)
                        continue
                    sets.before_event(out.topic, task.task_id, task.attempt)  # what waits first
                if out.internal:
                    produce_event(
                        self._events,
                        out.topic,
                        self.internal_partitions[out.topic],
                        task.task_id,
                        task.attempt,
                        out.event,
                        self.failures.of(task.attempt),
                        writer=task.writer,
                        seqs=self._seqs(task, out.topic),
                    )
                    self.failures.check(task.attempt)
            elif isinstance(out, DeadLetter):
                self.dlq.handle(
                    out.topic,
                    out.partition,
                    out.offset,
                    out.timestamp,
                    out.key,
                    out.value,
                    out.reason,
                    out.operator,
                )
                self.metrics.dead_letter(out.topic, out.reason)
            elif isinstance(out, AlignmentAborted) and self.send is not None:
                self.send(
                    DeclineCheckpoint(out.checkpoint_id, task.task_id, task.attempt, out.reason)
                )
            # SnapshotPoint: taken by the task's runner, where the state is still its.

    def _seqs(self, task: TaskRoute, topic: str) -> list[int]:
        seqs = task.seqs.get(topic)
        if seqs is None:
            seqs = task.seqs[topic] = [0] * self.internal_partitions[topic]
        return seqs

    def write_sets(self) -> None:
        """Write the barriers and watermarks that wait to go out together
        (:mod:`kstream.worker.eventsets`): after a trigger, at the end of each loop
        iteration (a failed delivery: ``internal_delivered`` finds it)."""
        if self.sets is not None:
            self.sets.write_all()

    def _produce_watermark(
        self, task: TaskRoute, topic: str, watermark: Watermark, partitions: list[int]
    ) -> None:
        """``task``'s watermark on ``partitions`` of ``topic`` only."""
        headers, value = encode_event(task.task_id, task.attempt, watermark, task.writer)
        failed = self.failures.of(task.attempt)
        produce_on(self._events, topic, partitions, headers, value, failed, self._seqs(task, topic))

    def _produce_internal(self, task: TaskRoute, out: OutputBatch) -> None:
        assert out.partitions is not None
        if self.sets is not None:  # the task's barrier or watermark goes before its records
            wm, first = self.sets.before_records(
                out.topic, task.task_id, task.attempt, out.partitions
            )
            if wm is not None and first:
                self._produce_watermark(task, out.topic, wm, first)
        produce = self.producer.produce
        headers = task.headers
        seqs = self._seqs(task, out.topic)
        failed = self.failures.of(task.attempt)  # called for failed deliveries only
        for p, k, v, ts in zip(out.partitions, out.keys, out.values, out.timestamps, strict=True):
            n = seqs[p]
            seqs[p] = n + 1
            h = [*headers, seq_header(n)]
            if ts <= 0:  # librdkafka writes a timestamp of 0 as "now": the time goes in a header
                h, ts = time_headers(h, ts), 0
            try:
                produce(
                    out.topic, v, k, partition=p, timestamp=ts, headers=h,
                    on_delivery=failed,
                )  # fmt: skip
            except BufferError:  # local queue full
                produce_with_retry(
                    self.producer,
                    out.topic,
                    v,
                    k,
                    full=True,
                    partition=p,
                    timestamp=ts,
                    headers=h,
                    on_delivery=failed,
                )
        self.producer.poll(0)
        self.failures.check(task.attempt)

    def internal_delivered(self, attempt: int) -> bool:
        """Whether every internal record and event written so far is delivered, waiting
        at most ``ACK_WAIT_S`` (``ACK_WAIT_BEHIND_S`` after a wait that fell short): a
        snapshot's acknowledgement waits for that (no checkpoint may complete without a
        record written before its barriers), and the processing goes on meanwhile, so an
        outage is ridden out. InternalDeliveryError if one of ``attempt`` was refused."""
        self.write_sets()
        left = self.producer.flush(ACK_WAIT_BEHIND_S if self._behind else ACK_WAIT_S)
        self._behind = left > 0
        self.failures.check(attempt)
        return not self._behind

    def flush_internal(self) -> None:
        """Wait until every internal record and event written so far is delivered or has
        failed (before source offsets are committed, before a bounded run publishes;
        ``message.timeout.ms`` bounds the wait: a shorter outage is waited out);
        InternalDeliveryError if one failed."""
        self.write_sets()
        self.producer.flush()
        self.failures.check()
