"""Checkpointed mode: the worker carries out what its protocol state machine decides
(:mod:`kstream.worker.protocol`) against its tasks and the control topic."""

from __future__ import annotations

import logging

from kstream.checkpoint.messages import (
    AcknowledgeCheckpoint,
    CheckpointCompleted,
    RestoreFailed,
    TaskReady,
)
from kstream.kafka.control import ControlClient
from kstream.kafka.sink import SinkFencedError
from kstream.kafka.source import SourceConsumer
from kstream.logs import ctx
from kstream.plan.fingerprint import PlanFingerprint, describe_difference
from kstream.store.base import CheckpointStore
from kstream.store.metadata import MetadataError, read_metadata
from kstream.store.plans import plan_parts, publish_plan
from kstream.worker.mode import Mode
from kstream.worker.protocol import (
    Action,
    Assigned,
    CommitSinks,
    Event,
    Exit,
    InputRead,
    RefusePlan,
    RestoreTasks,
    ResumeTasks,
    Send,
    StopRequested,
    StopTasks,
    TaskStopped,
    TriggerTasks,
    WorkerProtocol,
)
from kstream.worker.runner import TaskRunner, checkpoint_handle
from kstream.worker.settings import WorkerStats
from kstream.worker.tasks import WorkerTasks

log = logging.getLogger(__name__)


class Checkpointed(Mode):
    """Tasks run only in an attempt the coordinator resumed with this worker as owner."""

    def __init__(
        self,
        protocol: WorkerProtocol,
        control: ControlClient,
        tasks: WorkerTasks,
        source: SourceConsumer,
        store: CheckpointStore,
        app_id: str,
        stats: WorkerStats,
        label: str,
        fingerprint: PlanFingerprint | None = None,
    ) -> None:
        self.fingerprint = fingerprint
        self._pending: list[Action] = []  # decided from the history, carried out first
        self._verified: set[int] = set()  # completed checkpoints verified in the store
        self.protocol = protocol
        self.control = control
        self.tasks = tasks
        self.source = source
        self.store = store
        self.app_id = app_id
        self.stats = stats
        self.label = label

    @property
    def member(self) -> str:
        return self.source.member_id or self.label

    def start(self) -> None:
        if self.fingerprint is not None:
            publish_plan(self.store, self.app_id, self.fingerprint)
        self._pending = self.protocol.learn(self.control.read_to_end())

    def begin(self, now: float) -> int | None:
        self.control.check_outage()  # OutageExceeded past --max-outage: the job fails
        if self._pending:
            pending, self._pending = self._pending, []
            code = self._apply(pending, now)
            if code is not None:
                return code
        for msg in self.control.poll(0):
            if isinstance(msg, CheckpointCompleted) and not self.verified_completion(msg):
                continue
            code = self._handle(msg, now)
            if code is not None:
                return code
        return None

    def stop(self, now: float) -> int | None:
        return self._handle(StopRequested(), now)

    def on_assignment(self, now: float) -> None:
        tasks = tuple(spec.task_id for spec in self.tasks.assigned())
        self._handle(
            Assigned(self.member, self.source.generation, tasks, bool(self.source.assignment)), now
        )

    def on_input(self, now: float) -> None:
        self._handle(InputRead(), now)

    def end(self, now: float) -> int | None:
        member = self.member
        for r in list(self.tasks.runners.values()):
            for msg in r.finished_uploads(member):
                self.control.report(msg)
                if isinstance(msg, AcknowledgeCheckpoint):
                    self.stats.checkpoints_acked += 1
        return self._apply(self.protocol.tick(now), now)

    @property
    def draining(self) -> bool:
        return self.protocol.stopping

    def task_failed(self, runner: TaskRunner, reason: str) -> None:
        self.tasks.remove(runner.task_id)
        self._handle(TaskStopped(runner.task_id, runner.attempt, reason), self.tasks.ctx.clock())

    def close(self) -> None:
        self.control.close()

    # ---- carrying out the protocol's actions ----------------------------------------------

    def _handle(self, event: Event, now: float) -> int | None:
        return self._apply(self.protocol.handle(event, now), now)

    def _apply(self, actions: list[Action], now: float) -> int | None:
        unrestored: int | None = None  # an attempt whose checkpoint cannot be restored here
        failed: dict[str, str] = {}  # tasks whose restore could not reach the store/broker
        for a in actions:
            match a:
                case Send(message=TaskReady(attempt=attempt)) if attempt == unrestored:
                    continue  # never ready for a checkpoint this worker cannot restore
                case Send(message=TaskReady(task_id=task)) if task in failed:
                    pass
                case Send():
                    self.control.report(a.message)
                case RestoreTasks():
                    ok, failed = self._restore(a.attempt, a.checkpoint_id)
                    if not ok:
                        unrestored = a.attempt
                case StopTasks():
                    self.tasks.stop_all()
                case ResumeTasks():
                    self._resume(a.owned)
                case TriggerTasks():
                    for r in self.tasks.running():
                        self.guarded(r, r.trigger, a.checkpoint_id, a.attempt, now)
                case CommitSinks():
                    self._commit_sinks(a.checkpoint_id, now)
                case RefusePlan():
                    log.error("kstream: %s", self._plan_refusal(a))
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

    def verified_completion(self, msg: CheckpointCompleted) -> bool:
        """Whether the store holds checkpoint ``msg``'s metadata for its attempt and our
        plan. The control topic carries no authority (anyone may write to it): acting
        on a forged completion would publish a sealed epoch early, or write a commit
        marker no later epoch can pass. What cannot be verified is logged, counted and
        skipped."""
        n = msg.checkpoint_id
        if n in self._verified:
            return True
        try:
            meta = read_metadata(self.store, self.app_id, n)
        except MetadataError as e:
            why = f"no valid metadata in the store ({e})"
        else:
            plan = self.protocol.plan
            if meta.attempt != msg.attempt:
                why = f"its metadata is of attempt {meta.attempt}, the message says {msg.attempt}"
            elif meta.plan is not None and plan and meta.plan != plan:
                why = f"it was taken with plan {meta.plan}, ours is {plan}"
            else:
                self._verified = {k for k in self._verified if k > n - 100} | {n}
                return True
        self.stats.unverified_control += 1
        log.warning("ignoring CheckpointCompleted(%d, attempt %d): %s", n, msg.attempt, why)
        return False

    def _plan_refusal(self, a: RefusePlan) -> str:
        mine = self.fingerprint
        digest = mine.digest if mine is not None else self.protocol.plan
        detail = describe_difference(
            mine.parts if mine is not None else {}, plan_parts(self.store, self.app_id, a.plan)
        )
        return (
            f"this worker runs plan {digest}, the coordinator of {self.app_id!r} plan "
            f"{a.plan} (attempt {a.attempt}): {detail}. Every process of an app must run the "
            "same topology; deploy it everywhere or use a new app id"
        )

    def _restore(
        self, attempt: int, checkpoint_id: int | None
    ) -> tuple[bool, dict[str, str]]:
        """Restore every assigned task. ``(False, {})`` if some cannot restore
        ``checkpoint_id`` (each reported with ``RestoreFailed``, naming the object; none
        kept); else ``(True, unreachable)``: the tasks whose restore could not reach the
        store or the broker, with the reason (reported failed; the coordinator restores
        again)."""
        specs = self.tasks.assigned()

        def handle_of(task_id: str) -> str | None:
            return checkpoint_handle(self.store, self.app_id, task_id, checkpoint_id)

        corrupt, unreachable = self.tasks.restore(specs, attempt, handle_of)
        if corrupt and checkpoint_id is not None:
            for task_id, e in sorted(corrupt.items()):
                what = getattr(e, "object", None) or ""
                log.error(
                    "task %s cannot restore checkpoint %d (%s): %s",
                    task_id,
                    checkpoint_id,
                    what or "object not named",
                    e,
                    extra=ctx(attempt=attempt, task=task_id),
                )
                self.control.report(
                    RestoreFailed(attempt, task_id, self.member, checkpoint_id, str(e)[:2000], what)
                )
            self.protocol.tasks, self.protocol.running = set(), set()
            return False, {}
        if corrupt:  # start positions cannot fail to restore: something else is wrong
            raise next(iter(corrupt.values()))
        self.stats.restores += 1
        log.info(
            "attempt %d: restored %d task(s) to checkpoint %s (generation %s)",
            attempt,
            len(specs),
            checkpoint_id,
            self.source.generation,
            extra=ctx(attempt=attempt),
        )
        return True, unreachable

    def _resume(self, owned: frozenset[str]) -> None:
        for task_id, r in list(self.tasks.runners.items()):
            if task_id in owned:
                r.running = True
            else:  # another member owns it in this attempt: stay idle
                self.tasks.remove(task_id)
        # Resume the partitions, then seek them again: librdkafka starts fetching a
        # partition that was sought while paused only ~1 s after its resume, while a
        # seek of a fetching partition takes effect at once.
        self.tasks.sync_pauses(draining=self.draining)
        for r in self.tasks.runners.values():
            self.tasks.seek_restored(r)
        log.info(
            "attempt %d resumed: running %s",
            self.protocol.attempt,
            sorted(self.tasks.runners),
            extra=ctx(attempt=self.protocol.attempt),
        )

    def _commit_sinks(self, checkpoint_id: int, now: float) -> None:
        for r in list(self.tasks.runners.values()):
            try:
                r.commit_sinks(checkpoint_id)
            except SinkFencedError as e:  # a newer owner took this task over
                log.warning(
                    "task %s: %s; stopping it here",
                    r.task_id,
                    e,
                    extra=ctx(attempt=r.attempt, task=r.task_id),
                )
                self.tasks.remove(r.task_id)
                self._handle(TaskStopped(r.task_id, r.attempt, None), now)
