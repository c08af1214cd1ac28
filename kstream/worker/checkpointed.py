"""The checkpointed mode (the worker's default, :mod:`kstream.worker.mode`): it feeds
:class:`~kstream.protocol.worker.WorkerProtocol` the control topic and the loop's
observations, and carries its commands out against the worker's tasks, the control
topic, the checkpoint store and the sinks' commits (:mod:`kstream.worker.sinkcommit`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import replace

from kstream.checkpointstorage.base import CheckpointStore
from kstream.checkpointstorage.plans import plan_refusal, publish_plan
from kstream.kafka.control import ControlClient
from kstream.kafka.delivery import InternalDeliveryError
from kstream.kafka.sink import SinkError, SinkFencedError, SinkGroupFencedError
from kstream.kafka.source import TP, SourceConsumer
from kstream.logs import ctx
from kstream.plan.fingerprint import PlanFingerprint
from kstream.protocol.batching import batch
from kstream.protocol.commands import RefusePlan, Send
from kstream.protocol.messages import (
    AcknowledgeCheckpoint,
    AcknowledgeCheckpoints,
    CheckpointCompleted,
    Message,
    RestoreFailed,
    TaskReady,
    TasksReady,
    WatermarkBound,
)
from kstream.protocol.worker import WorkerProtocol
from kstream.protocol.workerevents import (
    AdoptTasks,
    Assigned,
    CommitSinks,
    DropTasks,
    Event,
    Exit,
    InputRead,
    OutputBuffered,
    QueriesServed,
    ReleaseTasks,
    RestoreTasks,
    ResumeTasks,
    StopRequested,
    StopTasks,
    TaskStopped,
    TriggerTasks,
    Unrestorable,
    WorkerCommand,
)
from kstream.worker.adopting import adopt
from kstream.worker.completions import Completions
from kstream.worker.global_alignment import GlobalAlignment
from kstream.worker.joining import wait_for_handover
from kstream.worker.keepalive import heartbeating
from kstream.worker.mode import Mode
from kstream.worker.pulse import PulseThread
from kstream.worker.runner import TaskRunner
from kstream.worker.settings import WorkerStats
from kstream.worker.sinkcommit import SinkCommitter
from kstream.worker.tasks import WorkerTasks

log = logging.getLogger(__name__)

TRIGGER_LOG_S = 1.0  # a trigger of this worker's tasks taking longer is logged at INFO


class Checkpointed(Mode):
    """Tasks run only in an attempt the coordinator resumed with this worker as owner."""

    def __init__(
        self,
        protocol: WorkerProtocol,
        control: ControlClient,
        tasks: WorkerTasks,
        source: SourceConsumer,
        store: CheckpointStore,
        stats: WorkerStats,
        label: str,
        fingerprint: PlanFingerprint | None = None,
    ) -> None:
        self.protocol = protocol
        self.control = control
        self.tasks = tasks
        self.source = source
        self.store = store
        self.app_id = tasks.ctx.config.app_id
        self.stats = stats
        self.label = label
        self.fingerprint = fingerprint
        self._pending: list[WorkerCommand] = []  # decided from the history, carried out first
        self.completions = Completions(store, self.app_id, protocol.plan, stats)
        transactions = tasks.ctx.transactions
        if transactions is None:
            raise ValueError("a checkpointed worker publishes through its transactions")
        self._committer = SinkCommitter(transactions)
        # Acknowledgements held while another task's upload of their checkpoint is in
        # flight here: a worker sends one message per checkpoint for all its tasks.
        self._held: list[AcknowledgeCheckpoint] = []
        self.alignment = GlobalAlignment(tasks.aligner.max_drift_ms)
        # Cooperatively, a thread writes this process's pulse (kstream.worker.pulse).
        self.pulse = PulseThread(self.control.pulse) if protocol.cooperative else None
        # Who else reads the control topic (the query directory, kstream.query.routing).
        self.observers: list[Callable[[Message], None]] = []

    @property
    def member(self) -> str:
        return self.source.member_id or self.label

    def start(self) -> None:
        if self.fingerprint is not None:
            publish_plan(self.store, self.app_id, self.fingerprint)
        history = self.control.read_to_end()
        for msg in history:
            for observe in self.observers:
                observe(msg)
        self._pending = self.protocol.learn(history)
        if self.protocol.job_live and not self.protocol.cooperative:
            # Joining a running job: a hand-over checkpoint first, so that the group's
            # change re-processes nothing (docs/design.md §6.6). Cooperatively, the
            # members that give this one partitions release those tasks, and it adopts
            # them; nothing else stops (§6.8).
            read = wait_for_handover(
                self.control,
                self.protocol,
                self.tasks.ctx.config.checkpointing,
                self.tasks.ctx.clock,
                self.backed,
            )
            for msg in read:
                for observe in self.observers:
                    observe(msg)
            self.protocol.catch_up(read)
        self.source.subscribe()
        if self.pulse is not None:
            self.pulse.start()

    def begin(self, now: float) -> int | None:
        self.control.check_outage()  # OutageExceeded past --max-outage: the job fails
        if self.pulse is not None:
            self.pulse.member = self.source.member_id or ""
        pending, self._pending = self._pending, []
        code = self._apply(pending, now)
        if code is not None:
            return code
        for msg in self.control.poll(0):
            if isinstance(msg, CheckpointCompleted) and not self.backed(msg):
                continue
            for observe in self.observers:
                observe(msg)
            if isinstance(msg, WatermarkBound):
                self.alignment.on_bound(msg, now)
                continue
            code = self._handle(msg, now)
            if code is not None:
                return code
        self.tasks.floor = self.alignment.floor(self.protocol.member, self.protocol.attempt, now)
        return None

    def stop(self, now: float) -> int | None:
        return self._handle(StopRequested(), now)

    def on_assignment(self, now: float) -> None:
        tasks = tuple(spec.task_id for spec in self.tasks.assigned())
        self._handle(
            Assigned(self.member, self.source.generation, tasks, bool(self.source.assignment)), now
        )

    def on_revoke(self, tps: list[TP]) -> None:
        """Inside the group's revocation, before this member rejoins: partitions taken from
        tasks that run on cooperatively are released, and the coordinator told so now —
        before their new owner, assigned only once this member rejoined, asks to adopt
        them (docs/design.md §6.8). Not for an assignment the group took away (this
        member was removed: its tasks are carried and adopted as a silent worker's)."""
        if self.source.revoking_lost:
            return
        remaining = tuple(spec.task_id for spec in self.tasks.assigned())
        released = self.protocol.release(remaining, self.source.generation)
        if released is not None:
            self.control.report(released)

    def on_input(self, now: float) -> None:
        self._handle(InputRead(), now)

    def serving_queries(self, url: str, now: float) -> None:
        self._handle(QueriesServed(url), now)

    def end(self, now: float) -> int | None:
        """Collect the sink commits that finished; acknowledge (or decline) every snapshot
        whose upload finished — batched: a checkpoint's acknowledgements wait until no
        upload of it is in flight here, then go out in one ``AcknowledgeCheckpoints``
        (:mod:`kstream.protocol.batching`); then the protocol's time-driven commands."""
        self._collect_commits(now, wait=False)
        finished = [r for r in self.tasks.runners.values() if r.has_finished_upload()]
        if finished and not self._internal_delivered(finished[0]):
            finished = []  # acknowledged at a later iteration
        member = self.member if finished or self._held else ""  # asks the client: if needed
        reports = [msg for r in finished for msg in r.finished_uploads(member)]
        reports = self._batched(reports, member)
        report = (
            None  # restoring: nothing runs, so nothing to report yet
            if self.protocol.restoring
            else self.alignment.report(
                self.protocol.member, self.protocol.attempt, self.tasks.slowest, now
            )
        )
        if report is not None:
            reports.append(report)
        self.control.post_all(reports)  # not waited for: see ControlClient.post_all
        self.stats.checkpoints_acked += sum(
            len(m.snapshots) for m in reports if isinstance(m, AcknowledgeCheckpoints)
        )
        if self.protocol.awaiting_first_output and any(
            r.output_buffered() for r in self.tasks.running()
        ):
            code = self._handle(OutputBuffered(), now)
            if code is not None:
                return code
        return self._apply(self.protocol.tick(now), now)

    def _batched(self, reports: list[Message], member: str) -> list[Message]:
        """``reports`` with their acknowledgements (and those held) as one message per
        checkpoint, except those of a checkpoint still uploading here (held)."""
        acks = self._held + [m for m in reports if isinstance(m, AcknowledgeCheckpoint)]
        if not acks:
            return reports
        uploading = {u.checkpoint_id for r in self.tasks.runners.values() for u in r.uploads}
        self._held = [a for a in acks if a.checkpoint_id in uploading]
        ready = [a for a in acks if a.checkpoint_id not in uploading]
        others = [m for m in reports if not isinstance(m, AcknowledgeCheckpoint)]
        return [*others, *batch(ready, member)]

    @property
    def draining(self) -> bool:
        return self.protocol.stopping

    def _internal_delivered(self, runner: TaskRunner) -> bool:
        """Whether the internal records written so far are delivered (``Router``); one
        refused fails ``runner``'s task: the job rolls back and replays it."""
        try:
            return self.tasks.ctx.router.internal_delivered(runner.attempt)
        except InternalDeliveryError as e:
            log.error("task %s failed: %s", runner.task_id, e)
            self.task_failed(runner, f"{type(e).__name__}: {e}")
            return False

    def task_failed(self, runner: TaskRunner, reason: str) -> None:
        self._collect_commits(self.tasks.ctx.clock(), wait=True)
        self.tasks.remove(runner.task_id)
        self._handle(TaskStopped(runner.task_id, runner.attempt, reason), self.tasks.ctx.clock())

    def settle(self) -> None:
        """The worker stops: its tasks' commits finish first (a stop after the final
        checkpoint publishes its output before the process exits). A commit that fails
        now is logged: its epochs are in the checkpoint, published after a restore."""
        try:
            outcomes = self._committer.collect(wait=True)
        except Exception as e:
            outcomes = {"": SinkError(str(e))}
        for failure in outcomes.values():
            if not isinstance(failure, SinkFencedError):  # (its new owner publishes)
                log.error("kstream: publishing the last completed checkpoint failed: %s", failure)

    def close(self) -> None:  # (Worker.close settled the commits before the tasks closed)
        if self.pulse is not None:
            self.pulse.close()
        self._committer.close()
        self.control.close()

    def backed(self, msg: CheckpointCompleted) -> bool:
        """Whether the store backs completion ``msg`` (:mod:`kstream.worker.completions`)."""
        return self.completions.backed(msg)

    def _handle(self, event: Event, now: float) -> int | None:
        return self._apply(self.protocol.handle(event, now), now)

    def _apply(self, commands: list[WorkerCommand], now: float) -> int | None:
        """Carry ``commands`` out in order; an exit code to stop the worker."""
        unrestored: int | None = None  # an attempt whose checkpoint cannot be restored here
        failed: dict[str, str] = {}  # tasks whose restore could not reach the store/broker
        for a in commands:
            if not isinstance(
                a, Send | CommitSinks | TriggerTasks | ReleaseTasks
            ):  # a restore, a stop, an exit: commits first
                # (Before a restore or a stop, a publication that failed stops nothing:
                # every task is rebuilt from the checkpoint, whose markers say what is
                # out. Stopped then, a task left the tasks the protocol restores, and
                # the coordinator's Resume did not run it: a failover more.)
                self._collect_commits(
                    now, wait=True, report=not isinstance(a, RestoreTasks | StopTasks)
                )
            match a:
                case Send(message=TaskReady(attempt=attempt) | TasksReady(attempt=attempt)) if (
                    attempt == unrestored
                ):
                    continue  # never ready for a checkpoint this worker cannot restore
                case Send(message=TaskReady(task_id=task)) if task in failed:
                    pass
                case Send(message=TasksReady() as ready) if failed:
                    tasks = tuple(t for t in ready.tasks if t not in failed)
                    if tasks:  # (the failed ones are reported failed below)
                        self.control.report(replace(ready, tasks=tasks))
                case Send():
                    self.control.report(a.message)
                case RestoreTasks():
                    ok, failed = self._restore(a.attempt, a.checkpoint_id, now)
                    if not ok:
                        unrestored = a.attempt
                case StopTasks():
                    self.tasks.stop_all(keep_held=a.keep_held)
                case DropTasks():
                    # (the publication in flight, which may hold their inputs' offsets, was
                    # collected above, as before any command that stops tasks)
                    if a.released:
                        log.info("tasks %s released: stopped here", sorted(a.tasks))
                    else:
                        log.warning(
                            "tasks %s were adopted by another worker: stopped here", a.tasks
                        )
                    for task in a.tasks:
                        self.tasks.remove(task)
                case AdoptTasks():
                    # (its heartbeats name them once they run: the checkpoints after it wait)
                    with self._heartbeating(without=a.tasks):
                        failed |= adopt(self.tasks, a.attempt, a.checkpoint_id, a.tasks, a.fence)
                case ResumeTasks():
                    self.tasks.resume(self.protocol.attempt, a.owned, draining=self.draining)
                case TriggerTasks():
                    self._trigger(a.checkpoint_id, a.attempt, now, a.hold)
                case ReleaseTasks():
                    assigned = self.source.assignment
                    for r in list(self.tasks.runners.values()):
                        if r.hold_at != a.checkpoint_id:
                            continue
                        if not r.inputs() <= assigned:  # kept over a group change: not ours
                            self.tasks.remove(r.task_id)
                        elif r.release():
                            self.guarded(r, r.task.snapshot_taken)  # what waited, in order
                case CommitSinks():
                    self._commit_sinks(a.checkpoint_id, now)
                case RefusePlan():
                    mine = self.fingerprint or PlanFingerprint(self.protocol.plan, {})
                    why = plan_refusal(self.store, self.app_id, mine, a.plan, a.attempt)
                    log.error("kstream: %s", why)
                    return 2
                case Exit():
                    if a.code == 0:
                        log.info("%s", a.reason)
                    else:
                        log.error("kstream: %s", a.reason)
                    return a.code
        for task, reason in failed.items():  # reported failed: the coordinator restores again
            self._handle(TaskStopped(task, self.protocol.attempt, reason), now)
        return None

    def _restore(
        self, attempt: int, checkpoint_id: int | None, now: float
    ) -> tuple[bool, dict[str, str]]:
        """Restore every assigned task. ``(False, {})`` if some cannot restore
        ``checkpoint_id`` (each reported with ``RestoreFailed``, naming the object; none
        kept); else ``(True, unreachable)``: the tasks whose restore could not reach the
        store or the broker, with the reason (reported failed; the coordinator restores
        again)."""
        with self._heartbeating(progress=lambda: self.tasks.restored):
            corrupt, unreachable = self.tasks.restore(attempt, checkpoint_id)
        if corrupt and checkpoint_id is not None:
            for task_id, e in sorted(corrupt.items()):
                what = getattr(e, "object", None) or ""
                published = getattr(e, "published", 0)
                self.control.report(
                    RestoreFailed(
                        attempt, task_id, self.member, checkpoint_id, str(e)[:2000], what, published
                    )
                )
            self._handle(Unrestorable(attempt), now)  # it holds no task now
            return False, {}
        if corrupt:  # start positions cannot fail to restore: something else is wrong
            raise next(iter(corrupt.values()))
        self.stats.restores += 1
        return True, unreachable

    def _trigger(self, checkpoint_id: int, attempt: int, now: float, hold: bool) -> None:
        """Trigger every running task, a heartbeat between two; then their barriers go
        out, one record per internal partition for them all (:mod:`kstream.worker.eventsets`;
        a record per task took tens of seconds per worker at 1024 partitions)."""
        # (With those holding: one whose barrier came before this trigger waits for it.)
        t0, running = time.perf_counter(), [r for r in self.tasks.runners.values() if r.running]
        for r in running:
            self.guarded(r, r.trigger, checkpoint_id, attempt, now, hold)
            self._heartbeat()
        self.tasks.ctx.router.write_sets()  # one record per partition for them all
        took = time.perf_counter() - t0
        log.log(
            logging.INFO if took >= TRIGGER_LOG_S else logging.DEBUG,
            "checkpoint %d: %d task(s) triggered in %.2f s%s",
            checkpoint_id,
            len(running),
            took,
            ", to hold after their snapshots (a hand-over)" if hold else "",
            extra=ctx(attempt=attempt, checkpoint=checkpoint_id),
        )

    def _heartbeat(self) -> None:
        """Send the heartbeat due now, if any (between the parts of long work: restoring
        or triggering hundreds of tasks)."""
        sends = self.protocol.heartbeat(self.tasks.ctx.clock())
        self.control.post_all([c.message for c in sends if isinstance(c, Send)])

    def _commit_sinks(self, checkpoint_id: int, now: float) -> None:
        """Start publishing every task's output up to ``checkpoint_id`` (the previous
        checkpoint's first collected); the processing goes on meanwhile."""
        self._collect_commits(now, wait=True)
        carried = self.completions.carried(checkpoint_id)
        if mine := carried & self.tasks.runners.keys():
            log.warning(
                "checkpoint %d carried this worker's tasks %s at an older snapshot (it was "
                "silent): their output is not published",
                checkpoint_id,
                ", ".join(sorted(mine)),
            )
        owned = [r for r in self.tasks.owned() if r.task_id not in carried]
        self._commits_ended(self._committer.start(owned, checkpoint_id), now)

    def _collect_commits(self, now: float, *, wait: bool, report: bool = True) -> None:
        """The publication in flight, if it finished (``wait``: once it did); its tasks'
        failures are handled (``report``) or only logged."""
        if not self._committer.busy:
            return
        if not wait:
            self._commits_ended(self._committer.collect(wait=False), now)
            return
        with self._heartbeating():  # a moving coordinator can hold a commit up for long
            outcomes = self._committer.collect(wait=True)
        if report:
            self._commits_ended(outcomes, now)
            return
        for task_id, e in sorted(outcomes.items()):
            log.warning("task %s: %s; its checkpoint is restored now", task_id, e)

    def _heartbeating(
        self, progress: Callable[[], int] | None = None, without: frozenset[str] = frozenset()
    ) -> AbstractContextManager[None]:
        """Heartbeats from another thread while this one waits on the cluster (with the
        ``progress`` of a restore; not naming the tasks ``without``, adopted now)."""
        hb = self.protocol.current_heartbeat()
        if hb is not None and without:
            hb = replace(hb, tasks=tuple(t for t in hb.tasks if t not in without))
        return heartbeating(
            hb,
            lambda hb: self.control.post_all([hb]),
            self.protocol.heartbeat_interval,
            progress,
        )

    def _commits_ended(self, outcomes: dict[str, SinkError], now: float) -> None:
        """Tasks whose sink commit did not publish: a fenced one (a newer owner took it
        over) stops here — unless, cooperatively, the group refused only an older
        generation and the task's inputs are still assigned here (it runs on); another
        fails, and the job restores its last completed checkpoint, whose restored sink
        publishes the epochs (or fails again, with the restart strategy's backoff) —
        never a worker crash over one task's output."""
        held = {s.task_id for s in self.tasks.assigned()} if self.protocol.cooperative else ()
        for task_id, e in outcomes.items():
            r = self.tasks.runners.get(task_id)
            if r is None:
                continue
            if isinstance(e, SinkGroupFencedError) and task_id in held:
                # Cooperatively, a rebalance moved the generation while the publication
                # was in flight, and this worker still holds the task's inputs: the
                # epochs stay buffered, published with the next completion's.
                log.info(
                    "task %s: %s; it still holds its inputs: published at the next completion",
                    task_id,
                    e,
                    extra=ctx(attempt=r.attempt, task=task_id),
                )
            elif isinstance(e, SinkFencedError):
                log.warning(
                    "task %s: %s; stopping it here",
                    task_id,
                    e,
                    extra=ctx(attempt=r.attempt, task=task_id),
                )
                self.tasks.remove(task_id)
                self._handle(TaskStopped(task_id, r.attempt, None), now)
            else:
                log.error(
                    "task %s failed: %s", task_id, e, extra=ctx(attempt=r.attempt, task=task_id)
                )
                self.task_failed(r, f"{type(e).__name__}: {e}")
