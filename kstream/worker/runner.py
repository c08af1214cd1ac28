"""One task on this worker: its build or restore, its snapshots, and each snapshot's
upload up to the acknowledgement (docs/design.md §4, §5, §7).

The runner calls its task and writes what the task outputs; when the outputs hold a
``SnapshotPoint`` the task holds still until the runner took the snapshot
(:meth:`kstream.runtime.task.Task.snapshot_taken`). Nothing in the task refers back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kstream.checkpointstorage.base import CheckpointStore
from kstream.checkpointstorage.layout import (
    CHECKPOINT_LABEL,
    FINAL_LABEL,
    numbered_manifest,
    snapshot_label,
    task_prefix,
)
from kstream.checkpointstorage.metadata import TaskSnapshot
from kstream.config import Guarantee, JobConfig
from kstream.elements.records import Position, SnapshotPoint
from kstream.kafka.dlq import DeadLetterWriter
from kstream.kafka.exactly_once_sink import ExactlyOnceSink
from kstream.kafka.sink import Sink
from kstream.kafka.worker_transactions import SinkCommit, WorkerTransactions, committable_offsets
from kstream.metrics.worker import WorkerMetrics
from kstream.operators.firing import Budget
from kstream.plan import JobPlan, TaskSpec
from kstream.protocol.messages import AcknowledgeCheckpoint, DeclineCheckpoint, Message
from kstream.runtime.task import Task
from kstream.sinkbuffer.budget import MemoryBudget
from kstream.snapshots.transfers import TransferPools
from kstream.snapshots.upload import DeferredBlob, SnapshotUploader, StateHandle
from kstream.state.base import SnapshottingBackend
from kstream.state.rocksdb_resources import StateResources
from kstream.worker.routing import Router, TaskRoute
from kstream.worker.settings import DebugPause, PausePoint

log = logging.getLogger(__name__)

TP = tuple[str, int]
SINK_BLOB = "sink"
SINK_SPILL_DIR = "sink-spill"  # in the task's state directory: the sink buffer past its budget
FIRING_SLICE_S = 0.02
"""Firing work per task call in a worker. Every task of the worker fires a slice per loop
iteration, and each step of a checkpoint (trigger, acknowledgement, completion, sink
commit) waits for an iteration's end: with 4 tasks firing, 0.5 s slices made a
checkpoint taken during a firing take 2-3 s, and the first output after a restore with
it (benchmarks/PROFILE.md, recovery). A slice costs a range-scan seek per operator."""


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


# ---- where a task's state comes from ----------------------------------------------------


def final_manifests(store: CheckpointStore, app_id: str, task_id: str) -> dict[int, str]:
    """A bounded task's stored final states, by id."""
    finals: dict[int, str] = {}
    for path in store.list(task_prefix(app_id, task_id)):
        numbered = numbered_manifest(path)
        if numbered is not None and numbered[0] == FINAL_LABEL:
            finals[numbered[1]] = path
    return finals


def has_due_output(sink: Sink, checkpoint_id: int) -> bool:
    """Whether ``CheckpointCompleted(checkpoint_id)`` makes ``sink`` publish records."""
    if not isinstance(sink, ExactlyOnceSink):
        return False
    last = sink.buffer.last_committed
    if last is not None and checkpoint_id <= last:
        return False
    return any(e.records for e in sink.buffer.due(checkpoint_id))


def exactly_inputs(sink: Sink) -> list[tuple[TP, int]]:
    """An exactly-once sink's inputs with their restored offsets (none for another)."""
    return sorted(sink.inputs.items()) if isinstance(sink, ExactlyOnceSink) else []


# ---- the runner ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RunnerContext:
    """What every runner of this worker shares.

    ``sink_guarantee``: the guarantee forced on every sink (at-least-once without
    checkpoints: there is nothing to commit a transaction on), None: as planned.
    ``sink_memory``: the memory budget every exactly-once sink task of this worker
    shares (``--sink-buffer-memory``: a bound for the process, not per task).
    ``state_resources``: the block cache, memtable budget (``--state-memory``) and
    checkpoint threads every task's RocksDB shares; ``transfers``: the threads every
    task's snapshot uploads and restores share. ``close`` stops their threads.
    """

    plan: JobPlan
    config: JobConfig
    store: CheckpointStore
    state_root: Path
    router: Router
    dlq: DeadLetterWriter
    pause: DebugPause
    clock: Callable[[], float]
    sink_guarantee: Guarantee | None = None
    metrics: WorkerMetrics = field(default_factory=WorkerMetrics)
    # The worker's one transactional producer for its exactly-once sinks, and how a
    # task's new owner waits for its inputs' group offsets to be stable (a previous
    # owner's publication in flight: kstream.kafka.worker_transactions). None: each
    # sink has a producer of its own.
    transactions: WorkerTransactions | None = None
    wait_stable: Callable[[list[TP]], None] | None = None
    sink_memory: MemoryBudget = field(init=False)
    state_resources: StateResources = field(init=False)
    transfers: TransferPools = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sink_memory", MemoryBudget(self.config.sink_buffer_memory))
        object.__setattr__(self, "state_resources", StateResources(self.config.state_memory))
        object.__setattr__(self, "transfers", TransferPools(max(1, self.store.concurrency)))

    def close(self) -> None:
        """Stop the shared threads, once every runner is closed."""
        self.transfers.close()
        self.state_resources.close()


@dataclass
class PendingUpload:
    """A snapshot whose upload runs in the background; acknowledged once it finished."""

    checkpoint_id: int
    attempt: int
    future: Future[StateHandle]
    alignment_ms: float
    positions: dict[str, Any]


class TaskRunner:
    """A task of this worker: runtime task, state backend, sinks, uploads in flight."""

    def __init__(
        self,
        ctx: RunnerContext,
        spec: TaskSpec,
        attempt: int,
        backend: SnapshottingBackend,
        route: TaskRoute,
        positions: Mapping[TP, Position],
        watermarks: Mapping[tuple[str, int, str], int] | None = None,
    ) -> None:
        self.ctx = ctx
        self.spec = spec
        self.attempt = attempt
        self.backend = backend
        self.route = route
        self.sinks = route.sinks
        self.uploader = SnapshotUploader(
            ctx.store, ctx.config.app_id, spec.task_id, pools=ctx.transfers
        )
        self.running = False
        # A hand-over checkpoint (docs/design.md §6.6): after its snapshot the task holds
        # — its snapshot point not released — until a restore replaces it or a release.
        self.hold_at: int | None = None
        self.holding = False
        self.hold_point: SnapshotPoint | None = None  # the snapshot it holds after
        # The (attempt, checkpoint) a restore built it for (kstream.worker.tasks).
        self.restored_as: tuple[int, int | None] | None = None
        self.final_id: int | None = None  # bounded run: id of the final snapshot taken
        self.uploads: list[PendingUpload] = []
        self.sink_blob_bytes = 0  # the exactly-once sink buffer in the latest snapshot
        self._triggered: dict[int, float] = {}  # checkpoint id -> when its trigger came
        # checkpoint id -> the inputs' offsets of its snapshot (the group's offsets in
        # the transaction that publishes it: kstream.kafka.worker_transactions)
        self._offsets: dict[int, dict[TP, int]] = {}
        self.task = Task(
            ctx.plan,
            spec,
            backend,
            attempt=attempt,
            bounded=ctx.config.bounded,
            restore_positions=positions,
            restore_watermarks=watermarks,
            now=ctx.clock(),
            # Window firings in slices (the loop goes on with them between its looks at
            # signals and the control topic): with checkpoints only, since without them
            # fed offsets are committed as processed.
            firing_budget=Budget(FIRING_SLICE_S) if ctx.config.checkpointing.enabled else None,
        )

    @property
    def task_id(self) -> str:
        return self.spec.task_id

    def inputs(self) -> set[TP]:
        return {(i.topic, i.partition) for i in self.spec.inputs}

    def step(self, call: Callable[..., None], *args: Any) -> None:
        """One call of the task, then its outputs written in order, each snapshot taken
        where the task output its ``SnapshotPoint``."""
        call(*args)
        route, task = self.ctx.router.route, self.task
        while True:
            out = task.drain()
            at = next((i for i, o in enumerate(out) if isinstance(o, SnapshotPoint)), None)
            if at is None:
                route(self.route, out)
                return
            point = out[at]
            assert isinstance(point, SnapshotPoint)
            route(self.route, out[:at])
            self._snapshot(point)
            route(self.route, out[at + 1 :])
            n = point.checkpoint_id
            if n is not None and (n == self.hold_at or n not in self._triggered):
                # A hand-over: what arrived after the barrier waits (release). Or this
                # worker has not read n's trigger yet — the barrier came first, through
                # a repartition topic — so whether n holds is not known: held until the
                # trigger says (docs/design.md §6.6).
                self.holding, self.hold_at, self.hold_point = True, n, point
                return
            task.snapshot_taken()  # replays what arrived after the barrier: maybe another point

    def trigger(self, checkpoint_id: int, attempt: int, now: float, hold: bool = False) -> None:
        """Checkpoint ``checkpoint_id`` was triggered: barriers into the task's sources;
        ``hold``: the task holds after its snapshot of it."""
        self._triggered[checkpoint_id] = now
        if self.holding and self.hold_at == checkpoint_id:
            # Its barrier came before the trigger (a task with sources snapshots only
            # after their barriers, injected here: it reads internal topics only).
            if not hold:
                self.release()
                self.step(self.task.snapshot_taken)
            return
        if self.holding:  # held for an earlier checkpoint whose trigger never came
            self.release()
            self.step(self.task.snapshot_taken)
        if hold:
            self.hold_at = checkpoint_id
        self.step(self.task.trigger_checkpoint, checkpoint_id, attempt, now)

    def release(self) -> bool:
        """Stop holding (or stop meaning to); whether the task held: then the caller
        replays what waited, ``step(task.snapshot_taken)``."""
        held, self.holding, self.hold_at, self.hold_point = self.holding, False, None, None
        return held

    def holds(self, checkpoint_id: int | None) -> bool:
        """Whether the task holds right after its snapshot of ``checkpoint_id``: its
        state, positions and sinks are that snapshot's (nothing in an exactly-once
        sink's open epoch: output after the snapshot point would be emitted again)."""
        return (
            self.holding
            and self.hold_point is not None
            and self.hold_at == checkpoint_id
            and not self.output_buffered()
        )

    # ---- snapshots ------------------------------------------------------------------------

    def _snapshot(self, point: SnapshotPoint) -> None:
        """The task's state is exactly checkpoint ``point``'s: take the synchronous part.

        Order matters: (1) everything the task output before the point went out or
        into the sink's epoch (the caller routed it), (2) the exactly-once sink seals
        that epoch so its buffer belongs to this snapshot, at-least-once output and dead
        letters are flushed (durable before the acknowledgement), (3) RocksDB checkpoint
        by hard links, (4) the upload runs in the background; the ack is sent when it
        finished.
        """
        ctx = self.ctx
        now = ctx.clock()
        # 2.
        n = point.checkpoint_id if point.checkpoint_id is not None else self._next_final_id()
        blobs: dict[str, bytes | DeferredBlob] = {}
        for s in self.sinks.values():
            s.on_barrier(n)
            blob = s.snapshot_blob()
            if blob is not None:
                blobs[SINK_BLOB] = blob
                self.sink_blob_bytes = len(blob) if isinstance(blob, bytes) else blob.size
        ctx.dlq.flush()
        # 3.
        label = snapshot_label(FINAL_LABEL if point.final else CHECKPOINT_LABEL, n)
        if point.final:
            self.final_id = n
        # A delta or a RocksDB checkpoint, written in the background (the upload waits for it).
        snap = self.backend.snapshot_sync(n, label=label, background=True, deltas=True)
        if point.checkpoint_id is not None:
            ctx.pause.at(
                PausePoint.AFTER_SNAPSHOT,
                f"checkpoint={n} task={self.task_id} attempt={self.attempt}",
            )
        # 4.
        self._offsets[n] = committable_offsets(
            (tp, point.positions.get(tp)) for tp in sorted(self.inputs())
        )
        positions = encode_positions(point.positions)
        marks = [[t, p, up, wm] for (t, p, up), wm in sorted(point.watermarks.items())]
        fut = self.uploader.upload(
            snap, positions=positions, attempt=point.attempt, blobs=blobs, watermarks=marks
        )
        seen = self._triggered.get(n, now)
        self.uploads.append(PendingUpload(n, point.attempt, fut, (now - seen) * 1000, positions))

    def _next_final_id(self) -> int:
        """Id of a bounded run's final snapshot: one above the task's previous final."""
        finals = final_manifests(self.ctx.store, self.ctx.config.app_id, self.task_id)
        return max(finals, default=0) + 1

    def has_finished_upload(self) -> bool:
        """Whether an upload finished that ``finished_uploads`` has not reported yet."""
        return any(u.future.done() for u in self.uploads)

    def finished_uploads(self, member: str, *, wait: bool = False) -> list[Message]:
        """The acknowledgement (or, if its upload failed, the decline) of every upload
        that finished (``wait``: of every upload, once finished)."""
        out: list[Message] = []
        keep = []
        for u in self.uploads:
            if not (wait or u.future.done()):
                keep.append(u)
                continue
            try:
                h = u.future.result()
            except Exception as e:  # the upload failed: decline, never ack
                log.error(
                    "task %s: upload of checkpoint %d failed: %s", self.task_id, u.checkpoint_id, e
                )
                out.append(
                    DeclineCheckpoint(
                        u.checkpoint_id, self.task_id, u.attempt, f"upload failed: {e}"
                    )
                )
                continue
            log.debug(
                "task %s: checkpoint %d acknowledged (trigger to barrier %.0f ms, sync "
                "%.0f ms, upload %.0f ms, %d of %d bytes uploaded)",
                self.task_id,
                u.checkpoint_id,
                u.alignment_ms,
                h.sync_ms,
                h.upload_ms,
                h.bytes_uploaded,
                h.bytes_total,
            )
            self.ctx.metrics.snapshot_acked(self.task_id, h.bytes_total)
            snapshot = TaskSnapshot(
                handle=h.manifest_path,
                offsets=u.positions,
                state_size=h.bytes_total,
                uploaded_size=h.bytes_uploaded,
                alignment_ms=u.alignment_ms,
                sync_ms=h.sync_ms,
                async_ms=h.upload_ms,
                member=member,
            )
            out.append(AcknowledgeCheckpoint(u.checkpoint_id, self.task_id, u.attempt, snapshot))
        self.uploads = keep
        return out

    # ---- sinks ----------------------------------------------------------------------------

    def due_sink_commits(self, checkpoint_id: int) -> tuple[list[SinkCommit], dict[TP, int]]:
        """Checkpoint ``checkpoint_id`` completed: each exactly-once sink's part of the
        worker's publication of it (``ExactlyOnceSink.due``, no Kafka call), and the
        inputs' offsets of its snapshot. Each part's ``published`` is called on this
        thread once the transaction committed, before this task's sinks are used again
        (``kstream.worker.sinkcommit``)."""
        commits: list[SinkCommit] = []
        for s in self.sinks.values():
            if has_due_output(s, checkpoint_id):
                self.ctx.pause.at(
                    PausePoint.BEFORE_SINK_COMMIT,
                    f"checkpoint={checkpoint_id} task={self.task_id} attempt={self.attempt}",
                )
            if isinstance(s, ExactlyOnceSink):
                commit = s.due(checkpoint_id)
                if commit is not None:
                    commits.append(commit)
            else:
                s.on_checkpoint_completed(checkpoint_id)
        self._triggered = {k: v for k, v in self._triggered.items() if k > checkpoint_id}
        done = [k for k in self._offsets if k <= checkpoint_id]
        offsets = self._offsets[max(done)] if done else {}
        for k in done:
            if k < checkpoint_id:
                del self._offsets[k]
        if not offsets:  # restored and not snapshotted since: the restored positions
            offsets = {tp: o for s in self.sinks.values() for tp, o in exactly_inputs(s)}
        return commits, offsets

    def output_buffered(self) -> bool:
        """Whether an exactly-once sink holds output no barrier sealed yet."""
        return any(
            isinstance(s, ExactlyOnceSink) and s.buffer.open.size for s in self.sinks.values()
        )

    def flush_sinks(self) -> None:
        """At-least-once: hand every record written so far to the producers."""
        for s in self.sinks.values():
            s.on_barrier(0)

    def close(self) -> None:
        self.uploader.close(wait=True)
        for s in self.sinks.values():
            s.close()
        self.backend.close()
