"""The tasks this worker runs and the partitions they read: which task reads a
partition, building and restoring tasks, seeking and pausing their inputs."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from kstream.checkpointstorage.base import StoreError
from kstream.checkpointstorage.metadata import task_manifests
from kstream.config import Guarantee
from kstream.elements.records import InternalEvent, InternalRecord
from kstream.kafka.clients import OFFSET_BEGINNING, KafkaException
from kstream.kafka.commits import CommitMarker, read_latest_markers
from kstream.kafka.dlq import DeadLetterWriter
from kstream.kafka.internal_batch import decode_records
from kstream.kafka.source import RawRecord, SourceConsumer, SourceError
from kstream.logs import ctx
from kstream.names import commits_topic
from kstream.plan import JobPlan, TaskSpec
from kstream.runtime.watermark_alignment import PartitionTime, WatermarkAligner
from kstream.sinkbuffer.epochs import SinkError
from kstream.snapshots.restore import CorruptSnapshotError, PublishedPastRestore
from kstream.worker.opening import (
    carry_on,
    open_runner,
    publish_restored,
    recover_in_place,
    refuse_republishing,
    sink_guarantees,
)
from kstream.worker.runner import RunnerContext, TaskRunner
from kstream.worker.settings import WorkerError

log = logging.getLogger(__name__)

TP = tuple[str, int]
ALIGN_EVERY_S = 0.05


class WorkerTasks:
    """The runners of this worker's tasks, by task id, and their input partitions."""

    def __init__(self, plan: JobPlan, source: SourceConsumer, ctx: RunnerContext) -> None:
        self.plan = plan
        self.source = source
        self.ctx = ctx
        self.seeks = 0  # how many seeks so far (see kstream.worker.backlog)
        self._sought: set[TP] | None = set()  # sought since ``take_sought`` (None: all)
        self.restored = 0  # tasks built so far by the restore in progress (its heartbeats)
        self.runners: dict[str, TaskRunner] = {}
        # Which task reads each partition (a partition belongs to exactly one task).
        self.task_of: dict[TP, str] = {
            (i.topic, i.partition): spec.task_id for spec in plan.tasks for i in spec.inputs
        }
        self.internal_parts = plan.internal_topic_partitions
        # Told the tasks a restore is about to build here (standby copies leave them alone).
        self.before_restore: list[Callable[[list[str]], None]] = []
        self._aligned: frozenset[TP] = frozenset()
        self._aligned_for: frozenset[int] = frozenset()  # the running runners it is for
        self._next_align = 0.0
        self._lag: dict[TP, int] = {}  # the consumer's, read at most every ALIGN_EVERY_S
        self._parts: dict[TP, PartitionTime] = {}  # what the last ``held`` compared
        self._holding: frozenset[TP] = frozenset()  # inputs of tasks holding (a hand-over)
        # Global alignment (kstream.worker.global_alignment): the slowest watermark per
        # topic over all workers (set by the mode), and this worker's own (its report).
        self.floor: dict[str, int] = {}
        self.slowest: dict[str, int] = {}
        self.aligner = WatermarkAligner(
            {
                topic: s.max_drift_ms
                for topic, s in plan.watermark_strategies.items()
                if s.max_drift_ms is not None
            }
        )
        # The partitions whose lag alignment reads (of the aligned topics only).
        self._aligned_parts = [tp for tp in self.task_of if tp[0] in self.aligner.max_drift_ms]

    # ---- which tasks ----------------------------------------------------------------------

    def assigned(self) -> list[TaskSpec]:
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

    def running_for(self, tp: TP) -> TaskRunner | None:
        """The running task that reads ``tp``, if this worker runs it now."""
        task_id = self.task_of.get(tp)
        r = self.runners.get(task_id) if task_id else None
        return r if r is not None and r.running else None

    def running(self) -> list[TaskRunner]:
        """The tasks that run now (not those holding after a hand-over checkpoint)."""
        return [r for r in self.runners.values() if r.running and not r.holding]

    def owned(self) -> list[TaskRunner]:
        """The runners whose inputs the group assigns to this worker now (read on the
        thread that serves the rebalances): only those may be published — the others'
        new owner publishes them (kstream.kafka.worker_transactions)."""
        mine = self.source.assignment
        return [r for r in self.runners.values() if r.inputs() <= mine]

    # ---- building, restoring, stopping ------------------------------------------------------

    def open(self, spec: TaskSpec, attempt: int, handle: str | None) -> TaskRunner:
        """Build task ``spec`` from the manifest ``handle`` (None: empty state) and keep
        it; what its restored sink buffered and never published goes out now."""
        runner = open_runner(self.ctx, spec, attempt, handle)
        self.runners[spec.task_id] = runner
        failed = publish_restored(self.ctx.transactions, [runner])
        if failed:
            self.remove(spec.task_id)
            raise failed[spec.task_id]
        return runner

    def restore(
        self, attempt: int, checkpoint_id: int | None
    ) -> tuple[dict[str, CorruptSnapshotError], dict[str, str]]:
        """Every assigned task at ``attempt`` from completed checkpoint ``checkpoint_id``
        (None: empty state at the start positions), not running, inputs paused and
        sought to where the restored tasks resume.

        Returns ``(corrupt, unreachable)``. ``corrupt``: the tasks whose checkpoint cannot
        be restored (a corrupt or missing object: the error names it); then no task is
        kept — the coordinator chooses an older checkpoint for all of them.
        ``unreachable``: tasks that could not be restored because the checkpoint store
        could not be reached or a sink could not take over its transactions or publish
        its buffered output (the broker unreachable, a record it refuses), with the
        reason: they fail, not the worker (the coordinator restores the same checkpoint
        again). Any other failure propagates. (A restore can take minutes — a worker
        opening 512 tasks at 1024 partitions took one —: the caller keeps the worker
        heard meanwhile, kstream.worker.keepalive.)"""
        specs = self.assigned()
        for hook in self.before_restore:
            hook([s.task_id for s in specs])
        store, app_id = self.ctx.store, self.ctx.config.app_id
        self.restored = 0
        # Tasks that stay here and held after their snapshot of this very checkpoint (a
        # hand-over, docs/design.md §6.6) carry on from it: nothing to download or open.
        held = {
            s.task_id: r
            for s in specs
            if (r := self.runners.get(s.task_id)) is not None and r.holds(checkpoint_id)
        }
        for task_id, r in held.items():
            del self.runners[task_id]
            self.ctx.metrics.task_closed(task_id, r.task)  # (its Task is replaced)
        # Restored here for this same attempt and checkpoint and not run since (the group
        # changed again during the restore): as the restore would build them again.
        kept = {
            s.task_id: r
            for s in specs
            if (r := self.runners.get(s.task_id)) is not None
            and not r.running
            and r.restored_as == (attempt, checkpoint_id)
        }
        for task_id in kept:
            del self.runners[task_id]
        self.stop_all()
        # Pause before seeking: nothing may be read for a task until it resumes.
        self.source.pause({(i.topic, i.partition) for s in specs for i in s.inputs})
        try:
            markers = self.read_markers(specs)
        except SinkError as unreadable:
            return {}, {s.task_id: f"restore failed (sink): {unreadable}" for s in specs}

        # Tasks restore in parallel: downloads and RocksDB opens wait on I/O and
        # release the GIL. The checkpoint's metadata is read once, by the first build
        # (one that fails is read again by the next, each failing as its own).
        built = threading.Lock()
        manifests: list[dict[str, str]] = []

        def handle_of(task_id: str) -> str | None:
            with built:
                if not manifests:
                    manifests.append(task_manifests(store, app_id, checkpoint_id))
                return manifests[0].get(task_id)

        def build(spec: TaskSpec) -> TaskRunner:
            handle, task_id = handle_of(spec.task_id), spec.task_id
            if task_id in kept or task_id in held:
                kept_or_held = kept.get(task_id) or held[task_id]
                try:  # (its backend and sinks: nothing else has them, closed if it fails)
                    if task_id in kept:
                        runner = kept_or_held
                        recover_in_place(task_id, runner.sinks.values(), attempt, markers)
                    else:
                        runner = carry_on(kept_or_held, attempt, markers)
                except BaseException:
                    kept_or_held.close()
                    raise
            else:
                runner = open_runner(self.ctx, spec, attempt, handle, markers)
            try:
                refuse_republishing(runner, checkpoint_id, handle)
            except PublishedPastRestore:
                runner.close()
                raise
            with built:
                self.restored += 1
            return runner

        with ThreadPoolExecutor(max_workers=min(8, max(1, len(specs)))) as pool:
            futures = [pool.submit(build, spec) for spec in specs]
        for spec, fut in zip(specs, futures, strict=True):
            e = fut.exception()
            if e is None:  # kept even if another failed: closed with the rest
                self.runners[spec.task_id] = fut.result()
        corrupt = {
            spec.task_id: e
            for spec, fut in zip(specs, futures, strict=True)
            if isinstance(e := fut.exception(), CorruptSnapshotError)
        }
        unreachable = {
            spec.task_id: "restore failed ("
            + ("store unreachable" if isinstance(e, StoreError) else "sink")
            + f"): {e}"
            for spec, fut in zip(specs, futures, strict=True)
            if isinstance(e := fut.exception(), (StoreError, SinkError))
        }
        for fut in futures:
            if not isinstance(fut.exception(), (CorruptSnapshotError, StoreError, SinkError)):
                fut.result()  # any other failure propagates: this worker fails
        if corrupt:
            for task_id, e in sorted(corrupt.items()):
                log.error(
                    "task %s cannot restore checkpoint %s (%s): %s",
                    task_id,
                    checkpoint_id,
                    getattr(e, "object", None) or "object not named",
                    e,
                    extra=ctx(attempt=attempt, task=task_id),
                )
            self.stop_all()
            return corrupt, {}
        for task_id, e in publish_restored(self.ctx.transactions, self.runners.values()).items():
            self.remove(task_id)
            unreachable[task_id] = f"restore failed (sink): {e}"
        for task_id, reason in unreachable.items():
            log.error("task %s: %s", task_id, reason)
        for runner in self.runners.values():
            runner.restored_as = (attempt, checkpoint_id)
            self.seek_restored(runner)
        log.info(
            "attempt %d: restored %d task(s) to checkpoint %s (generation %s)%s%s",
            attempt,
            len(specs),
            checkpoint_id,
            self.source.generation,
            f", {len(held)} of them carried on where they held" if held else "",
            f", {len(kept)} kept from the restore before" if kept else "",
            extra=ctx(attempt=attempt),
        )
        return {}, unreachable

    def read_markers(self, specs: list[TaskSpec]) -> dict[str, CommitMarker | None] | None:
        """The commit markers of the tasks in ``specs`` with exactly-once sinks, read in
        one pass once their inputs' group offsets are stable (a previous owner's
        publication in flight is waited for: kstream.kafka.worker_transactions); None
        when each sink reads its own (a producer of its own). SinkError when the cluster
        cannot answer."""
        ctx = self.ctx
        if ctx.transactions is None:
            return None
        eos = [s for s in specs if Guarantee.EXACTLY_ONCE in sink_guarantees(ctx, s).values()]
        if not eos:
            return {}
        if ctx.wait_stable is not None:
            ctx.wait_stable(sorted({(i.topic, i.partition) for s in eos for i in s.inputs}))
        cfg = ctx.config
        try:
            return read_latest_markers(
                cfg.bootstrap_servers,
                cfg.app_id,
                [s.task_id for s in eos],
                commits_topic(cfg.app_id),
                ctx.transactions.marker_partitions(),
                ctx.transactions.timeout,
                cfg.kafka,
            )
        except KafkaException as e:
            raise SinkError(f"reading the commit markers of {len(eos)} task(s) failed: {e}") from e

    def resume(self, attempt: int, owned: frozenset[str], *, draining: bool) -> None:
        """Run the restored tasks in ``owned``, stop the others (another member owns them
        in ``attempt``), and position the inputs again."""
        for task_id, r in list(self.runners.items()):
            if task_id in owned:
                r.running = True
            else:
                self.remove(task_id)
        # Resume the partitions, then seek them again: librdkafka starts fetching a
        # partition that was sought while paused only ~1 s after its resume, while a
        # seek of a fetching partition takes effect at once.
        self.sync_pauses(draining=draining)
        for r in self.runners.values():
            self.seek_restored(r)
        log.info(
            "attempt %d resumed: running %s",
            attempt,
            sorted(self.runners),
            extra=ctx(attempt=attempt),
        )

    def remove(self, task_id: str) -> None:
        """Stop and forget one task (it failed, or another worker owns it now)."""
        runner = self.runners.pop(task_id, None)
        if runner is not None:
            self.ctx.metrics.task_closed(task_id, runner.task)
            runner.close()

    def take_sought(self) -> set[TP] | None:
        """The partitions sought since the last call (None: every task was stopped)."""
        sought, self._sought = self._sought, set()
        return sought

    def seek_back(self, tp: TP, offset: int) -> None:
        """Read ``tp`` again from ``offset`` (records read but never fed were dropped)."""
        self._seek(tp, offset)

    def stop_all(self, *, keep_held: bool = False) -> None:
        """Stop every task; ``keep_held``: not those holding after a hand-over checkpoint
        (a group change: the restore that follows carries on those still assigned here
        and stops the others, docs/design.md §6.6). Whatever the assignment says now:
        an eager rebalance revokes everything first and assigns in a later poll."""
        self.seeks += 1  # no task runs what was read for the stopped ones
        self._sought = None
        kept = {}
        for task_id, r in self.runners.items():
            if keep_held and r.holding:
                kept[task_id] = r
                continue
            self.ctx.metrics.task_closed(task_id, r.task)
            r.close()
        self.runners = kept

    # ---- positions ---------------------------------------------------------------------------

    def seek_restored(self, runner: TaskRunner) -> None:
        """Position every input of ``runner`` where its restored task resumes."""
        for tp, pos in runner.task.seek_positions().items():
            self._seek(tp, OFFSET_BEGINNING if pos is None else pos)

    def seek_committed(self, runner: TaskRunner) -> None:
        """Start ``runner``'s inputs at the group's committed offsets (the earliest where none)."""
        for tp, off in self.source.committed(sorted(runner.inputs())).items():
            self._seek(tp, OFFSET_BEGINNING if off is None else off)

    def _seek(self, tp: TP, offset: int, timeout: float = 10.0) -> None:
        self.seeks += 1  # records read before are read again: the loop drops its backlog
        if self._sought is not None:
            self._sought.add(tp)
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.source.seek(tp, offset)
                return
            except SourceError as e:  # librdkafka: the partition is not fetching yet
                if time.monotonic() > deadline:
                    raise WorkerError(f"cannot seek {tp[0]}[{tp[1]}] to {offset}: {e}") from e
                time.sleep(0.05)

    # ---- pausing -----------------------------------------------------------------------------

    def sync_pauses(self, *, draining: bool = False, full: set[TP] | None = None) -> None:
        """Pause exactly: inputs of tasks not running, inputs held back by barrier
        alignment, ``full`` (held by watermark alignment with enough records in hand:
        ``kstream.worker.backlog``) and (``draining``: stopping gracefully) every
        user-topic input."""
        want: set[TP] = set(full or ())
        for r in self.runners.values():
            if not r.running or r.holding:
                want |= r.inputs()
            else:
                want |= set(r.task.paused_inputs())
        assigned = self.source.assignment
        want |= {tp for tp in assigned if self.task_of.get(tp) not in self.runners}
        if draining:
            want |= {tp for tp in assigned if tp[0] not in self.internal_parts}
        want &= assigned
        paused = self.source.paused
        add, drop = want - paused, paused - want
        if add:
            self.source.pause(add)
        if drop:
            self.source.resume(drop)

    def held(self, pending: set[TP], fed: TP | None = None) -> frozenset[TP]:
        """Source partitions too far ahead of their source's slowest (watermark alignment):
        their records are held, not fed (``kstream.worker.backlog``). ``pending``: the
        partitions with records read but not fed yet (they have records left, whatever
        the consumer's lag says). Asked again between the slices fed (a partition whose
        hold ends is fed only until it runs ahead again, not through everything read
        meanwhile): the watermarks are read at every call, the consumer's lag (it reads
        every partition's position) at most every ALIGN_EVERY_S — and at once when the
        running tasks changed (restored tasks that run ahead must be held from their
        first record, or each restart lets one batch past the drift bound).

        ``fed``: asked between the slices, the partition just fed. Feeding changes only
        the task that reads it (a barrier it completes may let that task's buffered
        source records through) and whether ``fed`` is still pending, so only that
        task's partitions are read again — not every running task's (O(tasks) after
        each slice: at 256 tasks a worker, a quarter of its processing thread).

        The inputs of tasks holding after a hand-over checkpoint are held too (their
        records wait here: the task may go on from there, docs/design.md §6.6)."""
        holding = self._holds(fed)
        aligned = self._held_by_alignment(pending, fed)
        return aligned | holding if holding else aligned

    def _holds(self, fed: TP | None) -> frozenset[TP]:
        """The inputs of the holding tasks: all looked at once per iteration, between
        slices only the task just fed (the only one that may have started holding)."""
        if fed is None:
            self._holding = frozenset(
                tp for r in self.runners.values() if r.holding for tp in r.inputs()
            )
        else:
            r = self.runners.get(self.task_of.get(fed, ""))
            if r is not None and r.holding and fed not in self._holding:
                self._holding = self._holding | r.inputs()
        return self._holding

    def _held_by_alignment(self, pending: set[TP], fed: TP | None) -> frozenset[TP]:
        if not self.aligner.max_drift_ms:
            return frozenset()
        now = time.monotonic()
        if fed is not None and now < self._next_align:
            r = self.running_for(fed)
            if r is not None:
                self._parts.update(self._times(r.task.source_watermarks(), pending))
            return self._align()
        running = [r for r in self.runners.values() if r.running]
        ids = frozenset(id(r) for r in running)
        if now >= self._next_align or ids != self._aligned_for:
            self._next_align, self._aligned_for = now + ALIGN_EVERY_S, ids
            # (unknown: nothing read yet, records may be left)
            self._lag = self.source.lag(self._aligned_parts)
        marks: dict[TP, tuple[int, bool]] = {}
        for r in running:
            marks.update(r.task.source_watermarks())
        self._parts = self._times(marks, pending)
        return self._align()

    def _times(
        self, marks: dict[TP, tuple[int, bool]], pending: set[TP]
    ) -> dict[TP, PartitionTime]:
        lag = self._lag
        return {
            tp: PartitionTime(wm, tp in pending or lag.get(tp, 1) > 0, end)
            for tp, (wm, end) in marks.items()
        }

    def _align(self) -> frozenset[TP]:
        self.slowest = self.aligner.slowest(self._parts)
        self._aligned = self.aligner.paused(self._parts, self.floor)
        return self._aligned

    # ---- decoding --------------------------------------------------------------------------

    def decode_internal(
        self, tp: TP, records: list[RawRecord], dlq: DeadLetterWriter
    ) -> list[InternalRecord | InternalEvent]:
        """The records and events of an internal partition's batch; a malformed one goes
        to the dead-letter topic with the reason."""
        items, bad = decode_records(records)
        for i, reason in bad:
            key, value, ts, offset, _headers = records[i]
            dlq.handle(tp[0], tp[1], offset, ts, key, value, reason)
            self.ctx.metrics.dead_letter(tp[0], reason)
        return items
