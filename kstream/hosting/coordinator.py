"""The coordinator process: one loop around the :class:`CheckpointCoordinator` state machine.

poll control messages → ``handle`` → execute commands → ``tick(now)`` → repeat.
Commands are executed in order; a ``WriteMetadata`` is executed (the file
created exclusively) and its outcome fed back before any later message is sent,
so ``CheckpointCompleted`` can never precede its metadata.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from typing import Any, Protocol

from kstream.checkpointstorage.base import CheckpointStore, StoreError
from kstream.checkpointstorage.controlkey import ensure_key
from kstream.checkpointstorage.history import (
    CheckpointFailure,
    CheckpointStatus,
    RestartRecord,
    record_failure,
    record_restart,
)
from kstream.checkpointstorage.layout import CHECKPOINT_LABEL, numbered_manifest, tasks_prefix
from kstream.checkpointstorage.metadata import (
    CheckpointMetadata,
    MetadataError,
    add_to_index,
    list_checkpoints,
    purgeable_offsets,
    write_metadata,
)
from kstream.checkpointstorage.plans import plan_parts
from kstream.checkpointstorage.savepoints import create_savepoint
from kstream.checkpointstorage.urls import open_store
from kstream.config import JobConfig
from kstream.hosting.recovering import recover_start
from kstream.hosting.retention_thread import RetentionThread
from kstream.kafka.clients import delete_records_before, make_admin
from kstream.kafka.control import ControlError, CoordinatorFenced
from kstream.kafka.coordinator_channel import CoordinatorChannel
from kstream.kafka.reachability import Reachability
from kstream.logs import ctx
from kstream.metrics import METRICS, Metrics
from kstream.metrics.labels import checkpoint_reason, restart_cause
from kstream.plan.compat import IncompatibleStateError
from kstream.plan.fingerprint import PlanFingerprint, describe_difference
from kstream.protocol.commands import (
    ApplyRetention,
    CleanupCheckpoint,
    Command,
    CreateSavepoint,
    Fail,
    Finish,
    RefusePlan,
    Send,
    WriteMetadata,
)
from kstream.protocol.coordinator import CheckpointCoordinator
from kstream.protocol.messages import Message, Restore
from kstream.snapshots.retention import apply_retention
from kstream.snapshots.retention_cache import RetentionCache

log = logging.getLogger(__name__)

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
# With ``detailed=True`` (the elected coordinator), why a run ended besides a job failure:
EXIT_FENCED, EXIT_UNAVAILABLE = 3, 4


class CoordinatorTransport(Protocol):
    """What the loop needs from the control topic (``kstream.kafka.coordinator_channel.CoordinatorChannel``)."""

    def open(self, timeout: float = 30.0) -> list[Message]: ...
    def poll(self, timeout: float) -> list[Message]: ...
    def send(self, messages: Sequence[Message], timeout: float = 30.0) -> None: ...
    def close(self) -> None: ...

    @property
    def skipped(self) -> int:
        """Control records skipped as malformed so far (counted in the metrics)."""
        ...

    @property
    def reach(self) -> Reachability | None:
        """Whether the brokers answer (None: this transport cannot tell): the loop forgives
        the silence an outage it waited out caused."""
        ...


class CommandExecutor:
    """Executes a coordinator's commands against the store and the control topic, in order."""

    def __init__(
        self,
        coordinator: CheckpointCoordinator,
        transport: CoordinatorTransport,
        store: CheckpointStore,
        app_id: str,
        clock: Callable[[], float],
        purge: Callable[[dict[tuple[str, int], int]], None] | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.purge = purge
        self.metrics = metrics or METRICS
        self._purged: dict[tuple[str, int], int] = {}
        self._young: dict[str, float] = {}  # retention: young shared files, their mtimes
        self._seen = RetentionCache()  # retention: what it read before (never changes)
        # Completed checkpoints not in the store's index yet: the retention thread adds
        # them before its run, so the index (a hint) costs the critical path nothing.
        self._unindexed: list[int] = []
        self._unindexed_lock = threading.Lock()
        self._retention = RetentionThread(self._apply_retention)
        self.coordinator = coordinator
        self.transport = transport
        self.store = store
        self.app_id = app_id
        self.clock = clock
        self.finished: str | None = None  # why the job stopped on request (exit 0)

    def execute(self, cmds: list[Command]) -> str | None:
        """Run ``cmds``; returns the hard-failure reason if one was among them."""
        queue: deque[Command] = deque(cmds)
        outbox: list[Message] = []
        failure: str | None = None
        while queue:
            cmd = queue.popleft()
            if isinstance(cmd, Send):
                outbox.append(cmd.message)
                if isinstance(cmd.message, Restore):
                    self._restarted(cmd.message)
                continue
            # Messages decided before this command go out before it runs.
            self._flush(outbox)
            match cmd:
                case WriteMetadata(metadata=meta):
                    queue.extendleft(reversed(self._write_metadata(meta.checkpoint_id, cmd)))
                case CleanupCheckpoint(checkpoint_id=n, handles=handles):
                    self._cleanup(n, handles)
                case ApplyRetention(retained=k):
                    self._retention.request(k)  # on its thread: the loop goes on
                case CreateSavepoint(name=name, metadata=meta):
                    self._create_savepoint(name, meta)
                case Finish(reason=reason):
                    self.finished = reason
                case RefusePlan(member=member, plan=theirs):
                    self._refuse_plan(member, theirs)
                case Fail(reason=reason):
                    failure = reason
        self._flush(outbox)
        for ended in self.coordinator.take_ended():
            self._ended(ended)
        return failure

    # ---- history and metrics (informational: never decides anything) ----------------------

    def recovered(self) -> None:
        """The gauges a restarted coordinator continues from (attempt, latest checkpoint)."""
        self.metrics.job_attempt.set(self.coordinator.attempt)
        latest = self.coordinator.latest_completed
        if latest is not None:
            self.metrics.last_checkpoint_id.set(latest.checkpoint_id)
            self.metrics.last_checkpoint_time.set(latest.complete_time)

    def _restarted(self, msg: Restore) -> None:
        reason = self.coordinator.failover.failure_reason
        self.metrics.job_restarts.labels(restart_cause(reason)).inc()
        self.metrics.job_attempt.set(msg.attempt)
        log.info(
            "attempt %d: restoring every task to checkpoint %s (%s)",
            msg.attempt,
            msg.checkpoint_id,
            reason,
            extra=ctx(attempt=msg.attempt),
        )
        record_restart(
            self.store,
            self.app_id,
            RestartRecord(msg.attempt, self.clock(), reason, msg.checkpoint_id),
        )

    def _completed(self, meta: CheckpointMetadata) -> None:
        m = self.metrics
        m.checkpoints_completed.inc()
        m.checkpoint_duration.observe(meta.duration_ms / 1000.0)
        m.checkpoint_size.observe(meta.state_size)
        m.checkpoint_uploaded.observe(meta.uploaded_size)
        for snap in meta.tasks.values():
            m.checkpoint_alignment.observe(snap.alignment_ms / 1000.0)
        m.last_checkpoint_id.set(meta.checkpoint_id)
        m.last_checkpoint_time.set(meta.complete_time)

    def _ended(self, ended: CheckpointFailure) -> None:
        label = checkpoint_reason(ended.reason)
        if ended.status == CheckpointStatus.FAILED:
            self.metrics.checkpoints_failed.labels(label).inc()
        else:
            self.metrics.checkpoints_aborted.labels(label).inc()
        record_failure(self.store, self.app_id, ended)

    def _refuse_plan(self, member: str, theirs: str) -> None:
        mine = self.coordinator.plan
        ours = plan_parts(self.store, self.app_id, mine)
        detail = describe_difference(ours or {}, plan_parts(self.store, self.app_id, theirs))
        log.error(
            "kstream: worker %s runs plan %s, this coordinator plan %s (%s): its reports are "
            "ignored. Every process of app %r must run the same topology",
            member,
            theirs or "(none)",
            mine,
            detail,
            self.app_id,
        )

    def _flush(self, outbox: list[Message]) -> None:
        if outbox:
            self.transport.send(list(outbox))
            outbox.clear()

    def _write_metadata(self, n: int, cmd: WriteMetadata) -> list[Command]:
        # 1. Create chk-<n>.json exclusively; 2. only on success does the
        # coordinator return CheckpointCompleted(n) — why: a receiver of the
        # announcement must always find the metadata.
        try:
            write_metadata(self.store, self.app_id, cmd.metadata, index=False)
        except StoreError as e:
            log.error("writing metadata of checkpoint %d failed: %s", n, e)
            return self.coordinator.metadata_failed(n, str(e), self.clock())
        with self._unindexed_lock:
            self._unindexed.append(n)  # ApplyRetention follows every completion
        self._completed(cmd.metadata)
        return self.coordinator.metadata_written(n, self.clock())

    def _create_savepoint(self, name: str, meta: CheckpointMetadata) -> None:
        try:
            path = create_savepoint(self.store, self.app_id, name, meta)
        except (StoreError, ValueError) as e:  # `kstream savepoint` times out and says so
            log.error("savepoint %s of checkpoint %d failed: %s", name, meta.checkpoint_id, e)
            return
        log.info("savepoint %s: checkpoint %d at %s", name, meta.checkpoint_id, path)

    def _cleanup(self, n: int, handles: tuple[str, ...]) -> None:
        for handle in handles:
            # Handles come from workers' acks: delete only what an ack of checkpoint n
            # can name — a task manifest chk-<n> of this app — never any other object.
            if not _is_manifest_of(self.app_id, handle, n):
                log.warning(
                    "not deleting %r for aborted checkpoint %d: not its manifest", handle, n
                )
                continue
            try:
                self.store.delete(handle)
            except StoreError as e:  # garbage only; retention finds it again
                log.warning("cleaning up aborted checkpoint %d: %s", n, e)

    def close(self) -> None:
        """Finish the retention runs requested so far (bounded)."""
        self._retention.close()

    def _apply_retention(self, retained: int) -> None:
        with self._unindexed_lock:
            ids, self._unindexed = self._unindexed, []
        if ids:
            add_to_index(self.store, self.app_id, ids)
        try:
            apply_retention(self.store, self.app_id, retained, young=self._young, cache=self._seen)
        except StoreError as e:  # retention is retried after the next completion
            log.warning("applying retention (keep %d) failed: %s", retained, e)
            return
        if self.purge is None:
            return
        # Internal topics are kept forever by time (their records carry event times);
        # what no retained checkpoint can restore from is deleted here instead.
        try:
            offsets = purgeable_offsets(list_checkpoints(self.store, self.app_id))
        except StoreError as e:  # the store is down: purging waits for the next completion
            log.warning("reading retained checkpoints for purging failed: %s", e)
            return
        due = {tp: o for tp, o in offsets.items() if o > self._purged.get(tp, 0)}
        if not due:
            return
        try:
            self.purge(due)
            self._purged.update(due)
        except Exception as e:  # purging is an optimisation: retried after the next completion
            log.warning("purging internal topics below %s failed: %s", due, e)


def run_coordinator(
    job: JobConfig,
    expected_tasks: frozenset[str],
    *,
    heartbeat_timeout: float = 10.0,
    transport: CoordinatorTransport | None = None,
    store: CheckpointStore | None = None,
    plan: PlanFingerprint | None = None,
    clock: Callable[[], float] = time.time,
    should_stop: Callable[[], bool] = lambda: False,
    poll_timeout: float = 0.05,
    metrics: Metrics | None = None,
    description: dict[str, Any] | None = None,
    detailed: bool = False,
    silent: Mapping[str, float] | None = None,
) -> int:
    """Coordinate ``job``'s checkpoints until a hard failure or ``should_stop``; the exit code.

    0: stopped on request, or after a stop with a savepoint (or checkpointing is
    disabled: nothing to coordinate); 1: the job failed hard, or another coordinator
    took over (the reason is logged); 2: the state to restore does not fit the plan.

    ``description`` (:func:`kstream.plan.operators.describe`) is the plan's: checkpoints
    carry it, and the checkpoint restored at start — the job's latest, or the one
    ``job.start`` names — must be restorable under it (:mod:`kstream.plan.compat`).
    With ``detailed``: 3 (another coordinator took over) and 4 (Kafka or the store
    failed it) instead of 1 for those. ``silent``: it takes over from a silent host, and
    these workers its candidate saw silent, with their silence in seconds
    (docs/design.md §6.8).
    """
    if not job.checkpointing.enabled:
        log.warning(
            "checkpointing is disabled for %r: no coordinator is needed "
            "(workers run on committed group offsets)",
            job.app_id,
        )
        return EXIT_OK
    executor: CommandExecutor | None = None
    hosting = ExitStack()  # the job's metric families, exported from recovery to exit
    channel: CoordinatorTransport | None = None
    try:
        store = store or open_store(job.store_url, job.store_options)
        # The key only the store's readers hold: this coordinator signs what it writes
        # and believes only signed coordinator messages (kstream.protocol.messages).
        channel = transport or CoordinatorChannel(
            job.bootstrap_servers,
            job.app_id,
            extra=job.kafka,
            replication=job.replication,
            max_outage=job.max_outage,
            key=ensure_key(store, job.app_id),
        )
        # 1. Fence the predecessor and read the control topic to its end;
        # 2. read the store's completed checkpoints — why both: ids continue above
        #    every id either of them has seen, and a lost announcement is repeated.
        history = channel.open()
        recovered = recover_start(store, job, history, plan, description, clock())
        coordinator = CheckpointCoordinator(
            expected_tasks,
            job.checkpointing,
            job.restart,
            heartbeat_timeout=heartbeat_timeout,
            recovered=recovered,
            description=description,
            plan=plan.digest if plan is not None else "",
            cooperative=job.cooperative,
        )
        log.info(
            "coordinator for %r: %d tasks, next checkpoint %d, attempt %d "
            "(%d control messages read at start)",
            job.app_id,
            len(expected_tasks),
            coordinator.next_checkpoint_id,
            coordinator.attempt,
            len(history),
        )
        executor = CommandExecutor(
            coordinator,
            channel,
            store,
            job.app_id,
            clock,
            purge=_internal_purger(job) if transport is None else None,
            metrics=metrics,
        )
        skipped = channel.skipped
        executor.recovered()
        hosting.enter_context(executor.metrics.coordinating())
        failure = executor.execute(coordinator.start(clock(), silent))
        # An outage of our own (seen while reading, or inside a send that waited it
        # out) silenced every worker's heartbeats too: they do not count against them.
        reach = channel.reach
        outages = reach.outages if reach is not None else 0
        # 3. The loop.
        while failure is None and executor.finished is None and not should_stop():
            due = coordinator.next_trigger_in(clock())
            for msg in channel.poll(poll_timeout if due is None else min(poll_timeout, due)):
                failure = failure or executor.execute(coordinator.handle(msg, clock()))
            if reach is not None and (reach.down or reach.outages != outages):
                outages = reach.outages
                coordinator.cut_off(clock())
            now_skipped = channel.skipped  # malformed control records
            if now_skipped > skipped:
                executor.metrics.control_skipped.inc(now_skipped - skipped)
                skipped = now_skipped
            failure = failure or executor.execute(coordinator.tick(clock()))
        if failure is not None:
            log.error("kstream: %s", failure)
            return EXIT_FAILED
        if executor.finished is not None:
            log.info("coordinator of %r: %s", job.app_id, executor.finished)
        return EXIT_OK
    except (IncompatibleStateError, MetadataError) as e:
        log.error("kstream: %s", e)
        return EXIT_USAGE
    except CoordinatorFenced as e:
        log.error("kstream: %s; this coordinator exits", e)
        return EXIT_FENCED if detailed else EXIT_FAILED
    except (ControlError, StoreError) as e:
        log.error("kstream: coordinator of %r stopped: %s", job.app_id, e)
        return EXIT_UNAVAILABLE if detailed else EXIT_FAILED
    finally:
        if executor is not None:
            executor.close()
        hosting.close()
        if channel is not None:
            channel.close()


def _is_manifest_of(app_id: str, handle: str, checkpoint_id: int) -> bool:
    """Whether ``handle`` is some task's manifest of checkpoint ``checkpoint_id`` of ``app_id``."""
    folder, _, _name = handle.rpartition("/")
    return (
        folder.startswith(tasks_prefix(app_id) + "/")
        and "/" not in folder[len(tasks_prefix(app_id)) + 1 :]
        and ".." not in folder
        and numbered_manifest(handle) == (CHECKPOINT_LABEL, checkpoint_id)
    )


def _internal_purger(job: JobConfig) -> Callable[[dict[tuple[str, int], int]], None]:
    """Deletes internal-topic records below given offsets (``delete_records``)."""
    admin = make_admin(job.bootstrap_servers, job.kafka)
    return lambda offsets: delete_records_before(admin, offsets)
