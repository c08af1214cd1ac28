"""The worker: one process in consumer group ``<app>`` running the tasks it is assigned.

One readable loop (``Worker.run``): read control messages, read a batch of records,
feed each task, write what the tasks output, send acknowledgements whose uploads
finished. Three modes (DESIGN §7, §9):

* **checkpointed** (default): tasks run only in an attempt the coordinator resumed
  with this worker as their owner. ``Restore(attempt, n)`` rolls every assigned
  task back to checkpoint *n* (state, input positions, sink buffer) and reports
  ``TaskReady``; ``Resume(attempt, owners)`` starts the tasks this worker owns.
  Any partition reassignment stops the tasks and waits for the next restore.
* **checkpointing off**: no coordinator; tasks start with empty state where the
  group's committed offsets are, sinks are at-least-once, offsets are committed
  periodically after the sinks are flushed.
* **bounded**: one worker reads every source partition up to the end offsets seen
  at start, ends the inputs, stores the final state once (no barrier) and exits.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from kstream.checkpoint.messages import (
    AcknowledgeCheckpoint,
    CheckpointCompleted,
    CheckpointRequest,
    DeclineCheckpoint,
    Heartbeat,
    JobFailed,
    Message,
    Restore,
    Resume,
    TaskFailed,
    TaskReady,
    TriggerCheckpoint,
)
from kstream.config import ConfigError, Guarantee, JobConfig
from kstream.job import Job
from kstream.kafka.clients import OFFSET_BEGINNING, make_producer, produce_with_retry
from kstream.kafka.control import ControlClient
from kstream.kafka.dlq import DeadLetterWriter
from kstream.kafka.internal import (
    EventKind,
    InternalEvent,
    InternalRecordError,
    data_headers,
    decode_event,
    produce_event,
    read_origin,
)
from kstream.kafka.sink import AtLeastOnceSink, ExactlyOnceSink, Sink, SinkFencedError
from kstream.kafka.source import RawRecord, SourceConsumer, SourceError
from kstream.plan import OutputKind, TaskSpec
from kstream.runtime.events import Barrier, EndOfInput, StreamEvent, Watermark
from kstream.runtime.records import (
    AlignmentAborted,
    DeadLetter,
    InternalRecord,
    Output,
    OutputBatch,
    OutputEvent,
    Position,
    SnapshotPoint,
)
from kstream.runtime.records import (
    InternalEvent as RuntimeEvent,
)
from kstream.runtime.task import Task
from kstream.state.restore import read_blob, restore_state
from kstream.state.rocksdb import RocksDBBackend
from kstream.state.snapshot import SnapshotUploader, StateHandle
from kstream.store.base import CheckpointStore
from kstream.store.layout import (
    CHECKPOINT_LABEL,
    FINAL_LABEL,
    numbered_manifest,
    snapshot_label,
    task_prefix,
)
from kstream.store.metadata import read_metadata
from kstream.store.urls import open_store

log = logging.getLogger(__name__)

TP = tuple[str, int]
SINK_BLOB = "sink"


class WorkerError(RuntimeError):
    """The worker cannot continue; the message says why."""


class PausePoint(StrEnum):
    """Test hook: where a worker stops to be killed (crash tests, never production).

    * ``after-snapshot``: a task took the synchronous part of a checkpoint's
      snapshot, before its upload and acknowledgement (between barrier and ack).
    * ``before-sink-commit``: ``CheckpointCompleted(n)`` arrived and an exactly-once
      sink has records due for *n*, before their transaction.
    """

    AFTER_SNAPSHOT = "after-snapshot"
    BEFORE_SINK_COMMIT = "before-sink-commit"


PAUSE_MARKER = "KSTREAM-DEBUG-PAUSE"


@dataclass(frozen=True)
class WorkerSettings:
    """Process-level settings of one worker (not part of the job's configuration).

    ``session_timeout_s``: the consumer group's session timeout: how soon a dead
    worker's partitions move to the others. ``drain_timeout_s``: how long a graceful
    stop (:meth:`Worker.request_stop`) waits for its final checkpoint. ``pause_at``:
    test hook, see :class:`PausePoint`; the worker prints ``KSTREAM-DEBUG-PAUSE
    <point> ...`` on stdout and blocks there until it is stopped or killed.
    """

    session_timeout_s: float = 10.0
    pause_at: PausePoint | None = None
    drain_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if self.session_timeout_s <= 0:
            raise ConfigError(f"session timeout must be > 0, got {self.session_timeout_s}")
        if self.drain_timeout_s < 0:
            raise ConfigError(f"drain timeout must be >= 0, got {self.drain_timeout_s}")


# ---- positions <-> JSON (manifests and acknowledgements) --------------------------------


def encode_positions(positions: Mapping[TP, Position]) -> dict[str, Any]:
    """JSON form of task input positions: ``"topic:partition"`` keys."""
    return {
        f"{t}:{p}": (dict(pos) if isinstance(pos, Mapping) else pos)
        for (t, p), pos in positions.items()
    }


def decode_positions(doc: Mapping[str, Any]) -> dict[TP, Position]:
    """Inverse of ``encode_positions``."""
    out: dict[TP, Position] = {}
    for k, v in doc.items():
        topic, _, part = k.rpartition(":")
        out[(topic, int(part))] = v
    return out


# ---- stream events <-> internal-topic records ------------------------------------------


def to_wire(event: StreamEvent, task: str, attempt: int) -> InternalEvent:
    """The internal-topic record form of a runtime stream event."""
    if isinstance(event, Barrier):
        return InternalEvent(
            EventKind.BARRIER,
            task,
            attempt,
            checkpoint_id=event.checkpoint_id,
            timestamp=event.timestamp,
        )
    if isinstance(event, Watermark):
        return InternalEvent(EventKind.WATERMARK, task, attempt, timestamp=event.timestamp)
    return InternalEvent(EventKind.END_OF_INPUT, task, attempt)


def from_wire(ev: InternalEvent) -> StreamEvent:
    """The runtime stream event of an internal-topic event record."""
    if ev.kind is EventKind.BARRIER:
        assert ev.checkpoint_id is not None and ev.timestamp is not None
        return Barrier(ev.checkpoint_id, ev.attempt, ev.timestamp)
    if ev.kind is EventKind.WATERMARK:
        assert ev.timestamp is not None
        return Watermark(ev.timestamp)
    return EndOfInput()


def _has_due_output(sink: Sink, checkpoint_id: int) -> bool:
    """Whether ``CheckpointCompleted(checkpoint_id)`` makes ``sink`` publish records."""
    if not isinstance(sink, ExactlyOnceSink):
        return False
    last = sink.buffer.last_committed
    if last is not None and checkpoint_id <= last:
        return False
    return any(e.records for e in sink.buffer.due(checkpoint_id))


# ---- one task on this worker -----------------------------------------------------------


@dataclass
class PendingUpload:
    checkpoint_id: int
    attempt: int
    future: Future[StateHandle]
    alignment_ms: float
    positions: dict[str, Any]


@dataclass
class TaskRunner:
    """A task of this worker: runtime task, state, sinks, uploads in flight."""

    spec: TaskSpec
    task: Task
    backend: RocksDBBackend
    uploader: SnapshotUploader
    sinks: dict[Guarantee, Sink]
    sink_topics: dict[str, Guarantee]
    attempt: int
    running: bool = False
    final_id: int | None = None  # bounded run: id of the final snapshot taken
    uploads: list[PendingUpload] = field(default_factory=list)
    headers: list[Any] = field(default_factory=list)  # ks.task / ks.attempt of its records

    def inputs(self) -> set[TP]:
        return {(i.topic, i.partition) for i in self.spec.inputs}

    def close(self) -> None:
        self.uploader.close(wait=True)
        for s in self.sinks.values():
            s.close()
        self.backend.close()


# ---- the worker ------------------------------------------------------------------------


class Worker:
    """Runs the tasks of ``job`` that the consumer group assigns to this process."""

    def __init__(
        self,
        job: Job,
        *,
        member_label: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        batch_size: int = 2000,
        heartbeat_interval: float = 1.0,
        commit_interval: float = 1.0,
        stop_when_idle: float | None = None,
        settings: WorkerSettings | None = None,
    ) -> None:
        self.job = job
        self.settings = settings or WorkerSettings()
        self.cfg: JobConfig = job.config
        self.plan = job.plan
        self.clock = clock
        self.batch_size = batch_size
        self.heartbeat_interval = heartbeat_interval
        self.commit_interval = commit_interval
        self.stop_when_idle = stop_when_idle
        self._last_input = clock()
        self._drained = False  # a checkpoint triggered after the last input completed
        self.label = member_label or f"{os.uname().nodename}/{os.getpid()}"
        self.checkpointed = self.cfg.checkpointing.enabled and not self.cfg.bounded
        self.store: CheckpointStore = open_store(self.cfg.store_url)
        self.state_root = Path(self.cfg.state_dir) / self.cfg.app_id
        self.stop_event = threading.Event()  # stop now
        self.stop_requested = threading.Event()  # stop after a final checkpoint
        self._stopping_since: float | None = None
        self._next_request = 0.0
        # Which task reads each partition (a partition belongs to exactly one task).
        self.task_of: dict[TP, str] = {}
        for spec in self.plan.tasks:
            for i in spec.inputs:
                self.task_of[(i.topic, i.partition)] = spec.task_id
        self.internal_parts = self.plan.internal_topic_partitions
        self.runners: dict[str, TaskRunner] = {}
        # Protocol state learnt from the control topic.
        self.attempt = 0
        self.restore_point: int | None = None
        self.restoring = False  # a Restore of ``attempt`` is pending its Resume
        self.failed_reason: str | None = None
        # Group membership.
        self._assignment_changed = False
        self._paused: set[TP] = set()
        self._next_heartbeat = 0.0
        self._next_commit = 0.0
        self._trigger_seen: dict[int, float] = {}
        # Checkpointing off: next offset to commit per partition (what was processed).
        self._processed: dict[TP, int] = {}
        self.stats = {"records": 0, "checkpoints_acked": 0, "restores": 0, "dead_letters": 0}
        self.dlq = DeadLetterWriter(
            self.cfg.app_id,
            self.cfg.bootstrap_servers,
            self.cfg.on_bad_record,
            producer_config=self.cfg.kafka,
        )
        self.producer = make_producer(
            self.cfg.bootstrap_servers, extra={"linger.ms": 5, **self.cfg.kafka}
        )
        self.control: ControlClient | None = None
        self.source = SourceConsumer(
            self.cfg.bootstrap_servers,
            self.cfg.group_id,
            sorted({tp[0] for tp in self.task_of}),
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            extra={
                "session.timeout.ms": int(self.settings.session_timeout_s * 1000),
                "heartbeat.interval.ms": min(1000, int(self.settings.session_timeout_s * 250)),
                **self.cfg.kafka,
            },
        )

    # ---- group membership callbacks (inside consume) ----------------------------------

    def _on_assign(self, tps: list[TP]) -> None:
        self._assignment_changed = True
        return None

    def _on_revoke(self, tps: list[TP]) -> None:
        self._assignment_changed = True
        if not self.checkpointed and not self.cfg.bounded:
            # Last chance to commit what was processed before the partitions move on.
            self._commit_offsets(set(tps))
            for tp in tps:
                self._processed.pop(tp, None)

    @property
    def member(self) -> str:
        return self.source.member_id or self.label

    def assigned_tasks(self) -> list[TaskSpec]:
        """Tasks whose every input partition is assigned to this worker."""
        mine = self.source.assignment
        out = []
        for spec in self.plan.tasks:
            ins = {(i.topic, i.partition) for i in spec.inputs}
            if ins <= mine:
                out.append(spec)
            elif ins & mine:
                raise WorkerError(
                    f"task {spec.task_id} got only part of its co-partitioned inputs "
                    f"({sorted(ins & mine)} of {sorted(ins)}): all workers must subscribe to the "
                    "same topics with the range assignor"
                )
        return out

    # ---- building and restoring tasks -------------------------------------------------

    def _task_dir(self, task_id: str) -> Path:
        return self.state_root / task_id

    def _sinks_for(
        self, spec: TaskSpec, attempt: int
    ) -> tuple[dict[Guarantee, Sink], dict[str, Guarantee]]:
        topics: dict[str, Guarantee] = {}
        for o in spec.outputs:
            if o.kind is OutputKind.SINK:
                g = o.guarantee or Guarantee.EXACTLY_ONCE
                if not self.checkpointed and not self.cfg.bounded:
                    g = Guarantee.AT_LEAST_ONCE  # no checkpoints: nothing to commit on
                topics[o.topic] = g
        sinks: dict[Guarantee, Sink] = {}
        if Guarantee.EXACTLY_ONCE in topics.values():
            sinks[Guarantee.EXACTLY_ONCE] = ExactlyOnceSink(
                self.cfg.app_id,
                spec.task_id,
                self.cfg.bootstrap_servers,
                producer_config=self.cfg.kafka,
            )
        if Guarantee.AT_LEAST_ONCE in topics.values():
            sinks[Guarantee.AT_LEAST_ONCE] = AtLeastOnceSink(
                spec.task_id, self.cfg.bootstrap_servers, producer_config=self.cfg.kafka
            )
        return sinks, topics

    def _checkpoint_handle(self, task_id: str, checkpoint_id: int | None) -> str | None:
        """The manifest of ``task_id`` in completed checkpoint ``checkpoint_id`` (None: none)."""
        if checkpoint_id is None:
            return None
        return read_metadata(self.store, self.cfg.app_id, checkpoint_id).tasks[task_id].handle

    def _final_manifests(self, task_id: str) -> dict[int, str]:
        """A bounded task's stored final states, by id."""
        finals: dict[int, str] = {}
        for path in self.store.list(task_prefix(self.cfg.app_id, task_id)):
            numbered = numbered_manifest(path)
            if numbered is not None and numbered[0] == FINAL_LABEL:
                finals[numbered[1]] = path
        return finals

    def _build_runner(self, spec: TaskSpec, attempt: int, handle: str | None) -> TaskRunner:
        """Task ``spec`` at ``attempt`` with the state of the manifest ``handle`` (None: empty,
        start positions). A checkpoint restore may fall back to an older retained one."""
        local = self._task_dir(spec.task_id)
        positions: dict[TP, Position] = {}
        blob: bytes | None = None
        if handle is None:
            shutil.rmtree(local, ignore_errors=True)  # start positions: empty state
            backend = RocksDBBackend(local)
        else:
            t0 = time.perf_counter()
            backend, manifest, rstats = restore_state(
                self.store,
                self.cfg.app_id,
                spec.task_id,
                handle,
                local,
                allow_fallback=not self.cfg.bounded,
            )
            positions = decode_positions(manifest.positions)
            if SINK_BLOB in manifest.blobs:
                blob = read_blob(self.store, manifest, SINK_BLOB)
            log.info(
                "task %s restored %s %d in %.0f ms (%s)",
                spec.task_id,
                "final state" if self.cfg.bounded else "checkpoint",
                manifest.checkpoint_id,
                (time.perf_counter() - t0) * 1000,
                rstats,
            )
        sinks, topics = self._sinks_for(spec, attempt)
        for s in sinks.values():
            # Fence zombies of this sink task, then publish what the restored
            # snapshot buffered but never committed (DESIGN §7).
            s.recover(blob if s.guarantee is Guarantee.EXACTLY_ONCE else None, attempt)
        runner_box: list[TaskRunner] = []
        task = Task(
            self.plan,
            spec,
            backend,
            attempt=attempt,
            bounded=self.cfg.bounded,
            restore_positions=positions,
            on_snapshot=lambda point: self._on_snapshot(runner_box[0], point),
            now=self.clock(),
        )
        runner = TaskRunner(
            spec=spec,
            task=task,
            backend=backend,
            uploader=SnapshotUploader(self.store, self.cfg.app_id, spec.task_id),
            sinks=sinks,
            sink_topics=topics,
            attempt=attempt,
            headers=data_headers(spec.task_id, attempt),
        )
        runner_box.append(runner)
        return runner

    def _seek_inputs(self, runner: TaskRunner) -> None:
        """Position every input of ``runner`` where its restored task resumes."""
        for tp, pos in runner.task.seek_positions().items():
            self._seek_with_retry(tp, OFFSET_BEGINNING if pos is None else pos)

    def _seek_with_retry(self, tp: TP, offset: int, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.source.seek(tp, offset)
                return
            except SourceError as e:  # librdkafka: the partition is not fetching yet
                if time.monotonic() > deadline:
                    raise WorkerError(f"cannot seek {tp[0]}[{tp[1]}] to {offset}: {e}") from e
                time.sleep(0.05)

    def _stop_runners(self) -> None:
        for r in self.runners.values():
            r.close()
        self.runners = {}

    def _restore_assigned(self) -> None:
        """Roll every assigned task back to ``restore_point`` and report it ready."""
        self._stop_runners()
        generation = self.source.generation or 0
        specs = self.assigned_tasks()
        # Pause before seeking: nothing may be read for a task until it resumes.
        self._pause({(i.topic, i.partition) for s in specs for i in s.inputs})
        # Tasks restore in parallel: downloads, RocksDB opens and sink fencing
        # (init_transactions, marker reads) wait on I/O and release the GIL.
        with ThreadPoolExecutor(max_workers=min(8, max(1, len(specs)))) as pool:
            futures = [
                pool.submit(
                    self._build_runner,
                    spec,
                    self.attempt,
                    self._checkpoint_handle(spec.task_id, self.restore_point),
                )
                for spec in specs
            ]
        for spec, fut in zip(specs, futures, strict=True):
            if fut.exception() is None:  # kept even if another failed: closed with the rest
                self.runners[spec.task_id] = fut.result()
        for fut in futures:
            fut.result()  # the first failure, if any, propagates
        for runner in self.runners.values():
            self._seek_inputs(runner)
        self.stats["restores"] += 1
        assert self.control is not None
        for spec in specs:
            self.control.send(TaskReady(self.attempt, spec.task_id, self.member, generation))
        log.info(
            "attempt %d: restored %d task(s) to checkpoint %s, ready (generation %d)",
            self.attempt,
            len(specs),
            self.restore_point,
            generation,
        )

    # ---- pausing -----------------------------------------------------------------------

    def _pause(self, tps: set[TP]) -> None:
        new = tps - self._paused
        if new:
            self.source.pause(new)
        self._paused |= new

    def _sync_pauses(self) -> None:
        """Pause exactly: inputs of tasks not running, and inputs held back by alignment."""
        want: set[TP] = set()
        for r in self.runners.values():
            if not r.running:
                want |= r.inputs()
            else:
                want |= set(r.task.paused_inputs())
        assigned = self.source.assignment
        want |= {tp for tp in assigned if self.task_of.get(tp) not in self.runners}
        if self._stopping_since is not None:  # draining: no more user input
            want |= {tp for tp in assigned if tp[0] not in self.internal_parts}
        want &= assigned
        add, drop = want - self._paused, (self._paused - want) & assigned
        if add:
            self.source.pause(add)
        if drop:
            self.source.resume(drop)
        self._paused = want

    # ---- output routing -----------------------------------------------------------------

    def _route(self, runner: TaskRunner, outputs: list[Output]) -> None:
        """Write a task's drained outputs in order."""
        for out in outputs:
            if isinstance(out, OutputBatch):
                if out.internal:
                    self._produce_internal(runner, out)
                else:
                    g = runner.sink_topics[out.topic]
                    # the batch's own lists: the task never touches a drained batch again
                    runner.sinks[g].write_columns(out.topic, out.keys, out.values, out.timestamps)
            elif isinstance(out, OutputEvent):
                if out.internal:
                    produce_event(
                        self.producer,
                        out.topic,
                        self.internal_parts[out.topic],
                        to_wire(out.event, runner.spec.task_id, runner.attempt),
                    )
            elif isinstance(out, DeadLetter):
                self.dlq.handle(
                    out.topic, out.partition, out.offset, None, out.key, out.value, out.reason
                )
                self.stats["dead_letters"] += 1
            elif isinstance(out, AlignmentAborted) and self.control is not None:
                self.control.send(
                    DeclineCheckpoint(
                        out.checkpoint_id, runner.spec.task_id, runner.attempt, out.reason
                    )
                )
            # SnapshotPoint is handled in _on_snapshot, where the state is still its.

    def _produce_internal(self, runner: TaskRunner, out: OutputBatch) -> None:
        produce = self.producer.produce
        headers = runner.headers
        assert out.partitions is not None
        for p, k, v, ts in zip(out.partitions, out.keys, out.values, out.timestamps, strict=True):
            try:
                produce(out.topic, v, k, partition=p, timestamp=max(ts, 0), headers=headers)
            except BufferError:  # local queue full
                produce_with_retry(
                    self.producer,
                    out.topic,
                    v,
                    k,
                    full=True,
                    partition=p,
                    timestamp=max(ts, 0),
                    headers=headers,
                )
        self.producer.poll(0)

    # ---- snapshots ------------------------------------------------------------------------

    def _on_snapshot(self, runner: TaskRunner, point: SnapshotPoint) -> None:
        """The task's state is exactly checkpoint ``point``'s: take the synchronous part.

        Order matters: (1) everything the task output before the point goes out or
        into the sink's epoch, (2) the exactly-once sink seals that epoch so its buffer
        belongs to this snapshot, at-least-once output and dead letters are flushed
        (durable before the acknowledgement), (3) RocksDB checkpoint by hard links,
        (4) the upload runs in the background; the ack is sent when it finished.
        """
        now = self.clock()
        # 1.
        self._route(runner, runner.task.drain())
        # 2.
        n = point.checkpoint_id if point.checkpoint_id is not None else self._final_id(runner)
        blobs: dict[str, bytes] = {}
        for s in runner.sinks.values():
            s.on_barrier(n)
            blob = s.buffer_blob()
            if blob is not None:
                blobs[SINK_BLOB] = blob
        self.dlq.flush()
        # 3.
        label = snapshot_label(FINAL_LABEL if point.final else CHECKPOINT_LABEL, n)
        if point.final:
            runner.final_id = n
        snap = runner.backend.snapshot_sync(n, label=label)
        if point.checkpoint_id is not None:
            self._debug_pause(
                PausePoint.AFTER_SNAPSHOT, f"checkpoint={n} task={runner.spec.task_id}"
            )
        # 4.
        positions = encode_positions(point.positions)
        fut = runner.uploader.upload(snap, positions=positions, attempt=point.attempt, blobs=blobs)
        seen = self._trigger_seen.get(n, now)
        runner.uploads.append(PendingUpload(n, point.attempt, fut, (now - seen) * 1000, positions))

    def _final_id(self, runner: TaskRunner) -> int:
        """Id of a bounded run's final snapshot: one above the task's previous final."""
        return max(self._final_manifests(runner.spec.task_id), default=0) + 1

    def _finish_uploads(self, wait: bool = False) -> None:
        for r in self.runners.values():
            keep = []
            for u in r.uploads:
                if not (wait or u.future.done()):
                    keep.append(u)
                    continue
                try:
                    h = u.future.result()
                except Exception as e:  # the upload failed: decline, never ack
                    log.error(
                        "task %s: upload of checkpoint %d failed: %s",
                        r.spec.task_id,
                        u.checkpoint_id,
                        e,
                    )
                    if self.control is not None:
                        self.control.send(
                            DeclineCheckpoint(
                                u.checkpoint_id, r.spec.task_id, u.attempt, f"upload failed: {e}"
                            )
                        )
                    continue
                log.debug(
                    "task %s: checkpoint %d acknowledged (trigger to barrier %.0f ms, sync "
                    "%.0f ms, upload %.0f ms, %d of %d bytes uploaded)",
                    r.spec.task_id,
                    u.checkpoint_id,
                    u.alignment_ms,
                    h.sync_ms,
                    h.upload_ms,
                    h.bytes_uploaded,
                    h.bytes_total,
                )
                if self.control is not None:
                    self.control.send(
                        AcknowledgeCheckpoint(
                            u.checkpoint_id,
                            r.spec.task_id,
                            u.attempt,
                            h.manifest_path,
                            offsets=u.positions,
                            state_size=h.bytes_total,
                            uploaded_size=h.bytes_uploaded,
                            alignment_ms=u.alignment_ms,
                            sync_ms=h.sync_ms,
                            async_ms=h.upload_ms,
                            member=self.member,
                        )
                    )
                    self.stats["checkpoints_acked"] += 1
            r.uploads = keep

    # ---- control messages -----------------------------------------------------------------

    def _learn_history(self) -> None:
        """Read the control topic to its end: the current attempt and whether it resumed."""
        assert self.control is not None
        for msg in self.control.read_to_end():
            if isinstance(msg, Restore) and msg.attempt >= self.attempt:
                self.attempt, self.restore_point, self.restoring = (
                    msg.attempt,
                    msg.checkpoint_id,
                    True,
                )
            elif isinstance(msg, Resume) and msg.attempt == self.attempt:
                self.restoring = False
        log.info(
            "control history: attempt %d, %s",
            self.attempt,
            "restoring" if self.restoring else "resumed",
        )

    def _handle(self, msg: Message, now: float) -> None:
        match msg:
            case TriggerCheckpoint() if msg.attempt == self.attempt:
                self._trigger_seen[msg.checkpoint_id] = now
                for r in list(self.runners.values()):
                    if r.running:
                        self._guarded(
                            r, r.task.trigger_checkpoint, msg.checkpoint_id, msg.attempt, now
                        )
            case CheckpointCompleted():
                if self._trigger_seen.get(msg.checkpoint_id, float("-inf")) > self._last_input:
                    self._drained = True
                for r in list(self.runners.values()):
                    try:
                        for s in r.sinks.values():
                            if _has_due_output(s, msg.checkpoint_id):
                                self._debug_pause(
                                    PausePoint.BEFORE_SINK_COMMIT,
                                    f"checkpoint={msg.checkpoint_id} task={r.spec.task_id}",
                                )
                            s.on_checkpoint_completed(msg.checkpoint_id)
                    except SinkFencedError as e:  # a newer owner took this task over
                        log.warning("task %s: %s; stopping it here", r.spec.task_id, e)
                        r.close()
                        del self.runners[r.spec.task_id]
                self._trigger_seen = {
                    k: v for k, v in self._trigger_seen.items() if k > msg.checkpoint_id
                }
            case Restore() if msg.attempt > self.attempt:
                self.attempt, self.restore_point, self.restoring = (
                    msg.attempt,
                    msg.checkpoint_id,
                    True,
                )
                log.info("restore: attempt %d from checkpoint %s", msg.attempt, msg.checkpoint_id)
                if self.source.assignment:
                    self._restore_assigned()
                else:
                    self._stop_runners()
            case Resume() if msg.attempt == self.attempt and self.restoring:
                self.restoring = False
                self._last_input, self._drained = now, False  # idle counts from here
                for task_id, r in list(self.runners.items()):
                    if msg.owners.get(task_id) == self.member:
                        r.running = True
                    else:  # another member owns it in this attempt: stay idle
                        r.close()
                        del self.runners[task_id]
                # Resume the partitions, then seek them again: librdkafka starts fetching
                # a partition that was sought while paused only ~1 s after its resume,
                # while a seek of a fetching partition takes effect at once.
                self._sync_pauses()
                for r in self.runners.values():
                    self._seek_inputs(r)
                log.info("attempt %d resumed: running %s", self.attempt, sorted(self.runners))
            case JobFailed():
                self.failed_reason = msg.reason
            case _:
                pass

    def _debug_pause(self, point: PausePoint, detail: str) -> None:
        """Test hook: at ``settings.pause_at``, say so on stdout and block until stopped."""
        if self.settings.pause_at is not point:
            return
        print(f"{PAUSE_MARKER} {point.value} {detail} attempt={self.attempt}", flush=True)
        log.warning("paused at %s (%s) for a crash test; waiting to be killed", point.value, detail)
        self.stop_event.wait()

    def _heartbeat(self, now: float) -> None:
        if self.control is None or now < self._next_heartbeat:
            return
        self._next_heartbeat = now + self.heartbeat_interval
        gen = self.source.generation
        if gen is None:
            return
        self.control.send(Heartbeat(self.member, tuple(sorted(self.runners)), gen))

    # ---- the loop -----------------------------------------------------------------------

    def run(self) -> int:
        """Run until stopped (0), the job failed (1), or a bounded run finished (0)."""
        if self.checkpointed:
            self.control = ControlClient(
                self.cfg.bootstrap_servers, self.cfg.app_id, extra=self.cfg.kafka
            )
            self._learn_history()
        try:
            return self._loop()
        finally:
            self.close()

    def request_stop(self) -> None:
        """Stop gracefully (safe from signal handlers and other threads): read no more
        input, have a checkpoint taken of everything read (so exactly-once output is
        published and a restart replays nothing), then stop; at most
        ``settings.drain_timeout_s`` is spent waiting for that checkpoint."""
        self.stop_requested.set()

    def _drain(self, now: float) -> bool:
        """One step of a graceful stop; True once the worker may stop."""
        if self._stopping_since is None:
            self._stopping_since = now
            if self.cfg.bounded:
                return True
            if not self.checkpointed:
                self._commit_offsets()  # flushes the output first
                return True
            if self.restoring or not any(r.running for r in self.runners.values()):
                return True  # nothing runs here, so nothing is left to commit
            self._last_input, self._drained = now, False
            self._sync_pauses()
            log.info("stopping: waiting for a final checkpoint of everything read")
        if self._drained:
            log.info("stopping: the final checkpoint completed")
            return True
        if now - self._stopping_since >= self.settings.drain_timeout_s:
            log.warning(
                "stopping without a final checkpoint: none completed within %.0fs (a restart "
                "replays from the last completed one)",
                self.settings.drain_timeout_s,
            )
            return True
        self._request_checkpoint(now, "graceful stop")
        return False

    def _request_checkpoint(self, now: float, reason: str) -> None:
        """Ask for a checkpoint now, unless one triggered after the last input is on its
        way (repeated every second until one is triggered)."""
        if (
            self.control is None
            or self.restoring
            or now < self._next_request
            or any(t > self._last_input for t in self._trigger_seen.values())
        ):
            return
        self._next_request = now + 1.0
        self.control.send(CheckpointRequest(self.member, self.attempt, reason))

    def _loop(self) -> int:
        ends: dict[TP, int] = {}
        while not self.stop_event.is_set():
            now = self.clock()
            if self.control is not None:
                for msg in self.control.poll(0):
                    self._handle(msg, now)
                if self.failed_reason is not None:
                    log.error("kstream: job failed: %s", self.failed_reason)
                    return 1
            if self.stop_requested.is_set() and self._drain(now):
                return 0
            batch = self.source.consume_batch(self.batch_size, 0.05)
            if self._assignment_changed:
                self._assignment_changed = False
                self._on_assignment(now)
                if self.cfg.bounded:
                    ends = self._bounded_ends()
                batch = {}  # records fetched around a rebalance are read again after the seeks
            if any(tp[0] not in self.internal_parts for tp in batch):
                # Input from a user topic (internal records are its consequences, and
                # carry barriers and watermarks even when no input arrives).
                self._last_input, self._drained = now, False
            for tp, records in batch.items():
                self._feed(tp, records, now)
            for r in list(self.runners.values()):
                if r.running:
                    self._guarded(r, r.task.tick, now)
            if self.cfg.bounded and self.runners:
                self._end_bounded_inputs(ends, now)
                if all(r.task.finished for r in self.runners.values()):
                    return self._finish_bounded()
            self._finish_uploads()
            self._sync_pauses()
            self._heartbeat(now)
            if not self.checkpointed and not self.cfg.bounded and now >= self._next_commit:
                self._commit_offsets()
                self._next_commit = now + self.commit_interval
                self._drained = True  # everything read so far is flushed and committed
            if self.stop_when_idle is not None and now - self._last_input >= self.stop_when_idle:
                if self._drained:
                    log.info(
                        "no input for %.1fs and all output committed: stopping",
                        now - self._last_input,
                    )
                    return 0
                self._request_checkpoint(now, "idle")  # rather than wait for the interval
        return 0

    def _on_assignment(self, now: float) -> None:
        log.info("assignment changed: %s", sorted(self.source.assignment))
        self._next_heartbeat = 0.0  # tell the coordinator at once
        if self.checkpointed:
            self._stop_runners()
            if self.restoring and self.source.assignment:
                self._restore_assigned()  # same attempt, new generation: ready again
            elif self.attempt > 0 and self.source.assignment and self.control is not None:
                # The attempt is resumed, yet this worker now holds partitions of tasks
                # it does not run (a rebalance, or a restart under static membership
                # that no rebalance announces): ask for a restore now rather than
                # leave the coordinator to notice a silent owner after its timeout.
                for spec in self.assigned_tasks():
                    self.control.send(
                        TaskFailed(
                            spec.task_id,
                            self.member,
                            self.attempt,
                            "its partitions were reassigned to a worker that does not run it",
                        )
                    )
            self._heartbeat(now)
            return
        # Unchecked or bounded: fresh tasks on the new assignment. Bounded tasks seek to
        # their previous final state; unchecked ones to the group's committed offsets
        # (the earliest where none), so the records fetched around the rebalance, which
        # the loop drops, are read again.
        self._stop_runners()
        for spec in self.assigned_tasks():
            if self.cfg.bounded:
                runner = self._bounded_runner(spec)
            else:
                runner = self._build_runner(spec, 0, None)
                self._seek_committed(runner)
            runner.running = True
            self.runners[spec.task_id] = runner

    def _feed(self, tp: TP, records: list[RawRecord], now: float) -> None:
        task_id = self.task_of.get(tp)
        r = self.runners.get(task_id) if task_id else None
        if r is None or not r.running:
            return  # not ours to run now: paused; re-read after the next restore
        topic, partition = tp
        self.stats["records"] += len(records)
        if topic in self.internal_parts:
            self._guarded(
                r, r.task.feed_internal, topic, partition, self._decode_internal(tp, records), now
            )
        else:
            self._guarded(r, r.task.feed_source, topic, partition, records, now)
        if not self.checkpointed:
            self._processed[tp] = records[-1][3] + 1

    def _guarded(self, r: TaskRunner, call: Callable[..., None], *args: Any) -> None:
        """Run one task call and write its output; a failure of the task fails it over.

        With checkpointing, the task is stopped and ``TaskFailed`` makes the coordinator
        roll the job back (a restart strategy bounds retries); otherwise the worker stops.
        """
        try:
            t0 = time.perf_counter()
            call(*args)
            self._route(r, r.task.drain())
            took = time.perf_counter() - t0
            if took > 0.25:  # e.g. a watermark that fired many windows at once
                log.debug("task %s: %s took %.0f ms", r.spec.task_id, call.__name__, took * 1000)
        except WorkerError:
            raise
        except Exception as e:  # user code or corrupt input: the task fails, with the reason
            reason = f"{type(e).__name__}: {e}"
            log.exception("task %s failed in attempt %d", r.spec.task_id, r.attempt)
            if self.control is None:
                raise WorkerError(f"task {r.spec.task_id} failed: {reason}") from e
            self.control.send(TaskFailed(r.spec.task_id, self.member, r.attempt, reason))
            r.close()
            del self.runners[r.spec.task_id]

    def _decode_internal(
        self, tp: TP, records: list[RawRecord]
    ) -> list[InternalRecord | RuntimeEvent]:
        items: list[InternalRecord | RuntimeEvent] = []
        for key, value, ts, offset, headers in records:
            try:
                origin = read_origin(headers)
                if origin.event is None:
                    items.append(
                        InternalRecord(origin.task, origin.attempt, offset, key, value, ts or 0)
                    )
                else:
                    ev = decode_event(origin, value)
                    items.append(RuntimeEvent(origin.task, origin.attempt, offset, from_wire(ev)))
            except InternalRecordError as e:
                self.dlq.handle(
                    tp[0], tp[1], offset, ts, key, value, f"malformed internal record: {e}"
                )
                self.stats["dead_letters"] += 1
        return items

    # ---- checkpointing off ----------------------------------------------------------------

    def _commit_offsets(self, tps: set[TP] | None = None) -> None:
        """At-least-once: flush every output, then commit what was processed (of ``tps``)."""
        if self.checkpointed or self.cfg.bounded or not self.runners:
            return
        for r in self.runners.values():
            for s in r.sinks.values():
                s.on_barrier(0)
        self.producer.flush()
        self.dlq.flush()
        self.source.commit({tp: o for tp, o in self._processed.items() if tps is None or tp in tps})

    def _seek_committed(self, runner: TaskRunner) -> None:
        """Checkpointing off: start ``runner``'s inputs at the group's committed offsets."""
        for tp, off in self.source.committed(sorted(runner.inputs())).items():
            self._seek_with_retry(tp, OFFSET_BEGINNING if off is None else off)

    # ---- bounded ------------------------------------------------------------------------------

    def _bounded_runner(self, spec: TaskSpec) -> TaskRunner:
        """A bounded task continues from its previous final state, if any."""
        finals = self._final_manifests(spec.task_id)
        runner = self._build_runner(spec, 0, finals[max(finals)] if finals else None)
        self._seek_inputs(runner)
        return runner

    def _bounded_ends(self) -> dict[TP, int]:
        """End offsets of the user-topic partitions at start: a bounded run reads up to them.

        A partition that holds nothing (empty, or every record deleted) ends at once: 0.
        """
        ends = {}
        for tp in self.source.assignment:
            if tp[0] not in self.internal_parts:
                low, high = self.source.offset_range(tp)
                ends[tp] = high if high > low else 0
        return ends

    def _end_bounded_inputs(self, ends: dict[TP, int], now: float) -> None:
        positions = self.source.positions([tp for tp in ends])
        for tp, end in list(ends.items()):
            pos = positions.get(tp)
            r = self.runners.get(self.task_of[tp])
            if r is None:
                continue
            seek = r.task.seek_positions().get(tp)
            if end == 0 or (pos is not None and pos >= end) or (seek is not None and seek >= end):
                r.task.end_input(tp[0], tp[1], now)
                self._route(r, r.task.drain())
                del ends[tp]

    def _finish_bounded(self) -> int:
        """All tasks ended: wait for the final state uploads, then publish the sink output.

        The final state (with the exactly-once sink's buffer) is stored first, then the
        buffer is committed with its marker: a crash in between is repaired by the next
        bounded run, whose sink recovery commits the buffer if the marker is missing.
        """
        self._finish_uploads(wait=True)
        for r in self.runners.values():
            if r.final_id is not None:
                for s in r.sinks.values():
                    s.on_checkpoint_completed(r.final_id)
        self.producer.flush()
        self.dlq.flush()
        log.info(
            "bounded run finished: %d records read, %d dead letters",
            self.stats["records"],
            self.dlq.count,
        )
        return 0

    def close(self) -> None:
        self._stop_runners()
        self.producer.flush(10)
        self.dlq.close()
        self.source.close()
        if self.control is not None:
            self.control.close()


__all__ = [
    "PAUSE_MARKER",
    "PausePoint",
    "Worker",
    "WorkerError",
    "WorkerSettings",
    "decode_positions",
    "encode_positions",
]
