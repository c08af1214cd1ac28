"""The worker's half of the control protocol (DESIGN §5-§7): what it decides, and the
checkpointed mode that carries those decisions out.

:class:`WorkerProtocol` is a pure state machine: ``handle(message, now)`` and
``tick(now)`` return actions, in order; it does no I/O and is tested with a fake
clock. Messages are the coordinator's (``Restore``, ``Resume``, ``TriggerCheckpoint``,
``CheckpointCompleted``, ``JobFailed``) and what the loop observes itself
(:class:`Assigned`, :class:`InputRead`, :class:`StopRequested`, :class:`TaskStopped`).
:class:`Checkpointed` (the worker's default mode, :mod:`kstream.worker.mode`) feeds it
the control topic and the loop's observations and carries its actions out against the
worker's tasks, the control topic and the checkpoint store.

One checkpoint, as this module sees it: ``TriggerCheckpoint`` -> :class:`TriggerTasks`
-> each running task's runner injects the barrier and, at its snapshot point, takes
the snapshot and uploads it (:mod:`kstream.worker.runner`) -> the finished upload's
``AcknowledgeCheckpoint`` goes out (:meth:`Checkpointed.end`) -> the coordinator's
``CheckpointCompleted``, once the store backs it -> :class:`CommitSinks` -> each
runner publishes its sinks' output for that checkpoint.

What the protocol decides:

* **restore and resume**: tasks run only in an attempt the coordinator resumed with
  this worker as their owner. ``Restore(attempt, n)`` rolls every assigned task back
  to checkpoint *n* and reports each ``TaskReady``; ``Resume(attempt, owners)``
  starts the tasks this worker owns. A new assignment during a restore restores
  again (ready in the new generation); after a resume it reports the tasks it now
  holds but does not run as failed, so the coordinator restores at once.
* **checkpoints**: a trigger of the current attempt goes to every running task;
  a completion commits the sinks. After a restore from a checkpoint, the first
  exactly-once output the resumed tasks buffer (:class:`OutputBuffered`) asks for a
  checkpoint at once, so output resumes without waiting out an interval.
* **when to stop**: a graceful stop (:class:`StopRequested`) reads no more input and
  asks for a checkpoint until one triggered after the last input completed (at most
  ``drain_timeout_s``); ``stop_when_idle`` does the same once no input came for that
  long. ``JobFailed`` stops with exit code 1.
* **heartbeats** every ``heartbeat_interval`` with the tasks this worker holds.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from kstream.checkpoint.messages import (
    AcknowledgeCheckpoint,
    CheckpointCompleted,
    CheckpointRequest,
    Heartbeat,
    JobFailed,
    Message,
    Restore,
    RestoreFailed,
    Resume,
    StopJob,
    TaskFailed,
    TaskReady,
    TriggerCheckpoint,
)
from kstream.kafka.control import ControlClient
from kstream.kafka.sink import SinkFencedError
from kstream.kafka.source import SourceConsumer
from kstream.logs import ctx
from kstream.plan.fingerprint import PlanFingerprint
from kstream.store.base import CheckpointStore
from kstream.store.metadata import unbacked_completion
from kstream.store.plans import plan_refusal, publish_plan
from kstream.worker.mode import Mode
from kstream.worker.runner import TaskRunner
from kstream.worker.settings import WorkerStats
from kstream.worker.sinkcommit import SinkCommitter
from kstream.worker.tasks import WorkerTasks

log = logging.getLogger(__name__)

REQUEST_EVERY_S = 1.0  # a checkpoint request is repeated this often until one is triggered
REASSIGNED = "its partitions were reassigned to a worker that does not run it"

# ---- what the loop observes ---------------------------------------------------------------


@dataclass(frozen=True)
class Assigned:
    """The group assignment changed: this worker is ``member`` in ``generation``; it holds
    partitions (``any_partitions``), among them every input of ``tasks``."""

    member: str
    generation: int | None
    tasks: tuple[str, ...]
    any_partitions: bool


@dataclass(frozen=True)
class InputRead:
    """Records of a user topic arrived."""


@dataclass(frozen=True)
class OutputBuffered:
    """An exactly-once sink of a running task holds output not yet sealed by a barrier."""


@dataclass(frozen=True)
class StopRequested:
    """Stop gracefully (SIGTERM, or the embedding program)."""


@dataclass(frozen=True)
class TaskStopped:
    """A task stopped here: it failed (``reason``: reported) or was fenced (None)."""

    task_id: str
    attempt: int
    reason: str | None


Event = Message | Assigned | InputRead | OutputBuffered | StopRequested | TaskStopped

# ---- what the loop does --------------------------------------------------------------------


@dataclass(frozen=True)
class Send:
    """Write ``message`` to the control topic."""

    message: Message


@dataclass(frozen=True)
class RestoreTasks:
    """Stop every task; restore every assigned task to checkpoint ``checkpoint_id``
    (None: start positions) in ``attempt``, not running, its inputs paused."""

    attempt: int
    checkpoint_id: int | None


@dataclass(frozen=True)
class StopTasks:
    """Stop every task."""


@dataclass(frozen=True)
class ResumeTasks:
    """Run the restored tasks in ``owned``; stop the others; seek the inputs again."""

    owned: frozenset[str]


@dataclass(frozen=True)
class TriggerTasks:
    """Inject barrier ``checkpoint_id`` of ``attempt`` into every running task."""

    checkpoint_id: int
    attempt: int


@dataclass(frozen=True)
class CommitSinks:
    """Checkpoint ``checkpoint_id`` completed: every task publishes its sinks' output."""

    checkpoint_id: int


@dataclass(frozen=True)
class RefusePlan:
    """The coordinator runs another plan (fingerprint ``plan``, seen on its Restore of
    ``attempt``): this worker must not run; it exits 2 saying what differs."""

    plan: str
    attempt: int


@dataclass(frozen=True)
class Exit:
    """Stop the worker with ``code`` (0: done, 1: the job failed), for ``reason``."""

    code: int
    reason: str


Action = (
    Send | RestoreTasks | StopTasks | ResumeTasks | TriggerTasks | CommitSinks | RefusePlan | Exit
)


class WorkerProtocol:
    """The worker's protocol state; see the module docstring."""

    def __init__(
        self,
        member: str,
        *,
        now: float,
        heartbeat_interval: float = 1.0,
        stop_when_idle: float | None = None,
        drain_timeout_s: float = 30.0,
        plan: str = "",
    ) -> None:
        self.member = member
        # This worker's plan fingerprint (kstream.plan.fingerprint): in its reports, and
        # compared with the coordinator's on every Restore.
        self.plan = plan
        self.generation: int | None = None
        self.heartbeat_interval = heartbeat_interval
        self.stop_when_idle = stop_when_idle
        self.drain_timeout_s = drain_timeout_s
        # Learnt from the control topic.
        self.attempt = 0
        self.restore_point: int | None = None
        self.restoring = False  # a Restore of ``attempt`` is pending its Resume
        # This worker's tasks.
        self.assigned: tuple[str, ...] = ()
        self.any_partitions = False
        self.tasks: set[str] = set()  # held here (restored or running)
        self.running: set[str] = set()
        # Draining and idleness.
        self.last_input = now
        self.drained = False  # a checkpoint triggered after the last input completed
        self.stopping_since: float | None = None
        self.trigger_seen: dict[int, float] = {}
        # Resumed from a checkpoint and no output buffered since: the first output
        # asks for a checkpoint at once (OutputBuffered).
        self.awaiting_first_output = False
        self._next_request = 0.0
        self._next_heartbeat = 0.0

    def learn(self, history: Iterable[Message]) -> list[Action]:
        """The control topic read to its end: the current attempt and whether it resumed
        (no actions: kept a list for what a history may require)."""
        history = list(history)
        for msg in history:
            if isinstance(msg, Restore) and msg.attempt >= self.attempt:
                self.attempt, self.restore_point, self.restoring = (
                    msg.attempt,
                    msg.checkpoint_id,
                    True,
                )
            elif isinstance(msg, Resume) and msg.attempt == self.attempt:
                self.restoring = False
        log.info(
            "control history: %d messages read at start, attempt %d, %s",
            len(history),
            self.attempt,
            "restoring" if self.restoring else "resumed",
        )
        # The history's Restore may be an earlier deployment's (an upgrade starts the
        # new plan's coordinator after this worker): only a Restore read live, from
        # the running coordinator, is compared with this worker's plan.
        return []

    def _foreign(self, msg: Restore) -> bool:
        """Whether the coordinator that wrote ``msg`` runs another plan than this worker."""
        return bool(self.plan and msg.plan and msg.plan != self.plan)

    @property
    def stopping(self) -> bool:
        """Stopping gracefully: no more user input is read."""
        return self.stopping_since is not None

    # ---- messages and observations -------------------------------------------------------

    def handle(self, event: Event, now: float) -> list[Action]:
        match event:
            case TriggerCheckpoint() if event.attempt == self.attempt:
                self.trigger_seen[event.checkpoint_id] = now
                return [TriggerTasks(event.checkpoint_id, event.attempt)]
            case CheckpointCompleted():
                if self.trigger_seen.get(event.checkpoint_id, float("-inf")) > self.last_input:
                    self.drained = True
                self.trigger_seen = {
                    k: v for k, v in self.trigger_seen.items() if k > event.checkpoint_id
                }
                return [CommitSinks(event.checkpoint_id)]
            case Restore() if event.attempt > self.attempt and self._foreign(event):
                return [RefusePlan(event.plan, event.attempt)]
            case Restore() if event.attempt > self.attempt:
                self.attempt, self.restore_point, self.restoring = (
                    event.attempt,
                    event.checkpoint_id,
                    True,
                )
                log.info(
                    "restore: attempt %d from checkpoint %s",
                    event.attempt,
                    event.checkpoint_id,
                    extra=ctx(attempt=event.attempt),
                )
                if self.any_partitions:
                    return self._restore()
                self.tasks, self.running = set(), set()
                return [StopTasks()]
            case Resume() if event.attempt == self.attempt and self.restoring:
                self.restoring = False
                self.last_input, self.drained = now, False  # idle counts from here
                self.running = {t for t in self.tasks if event.owners.get(t) == self.member}
                self.tasks = set(self.running)  # another member owns the rest: stay idle
                self.awaiting_first_output = bool(self.running) and self.restore_point is not None
                return [ResumeTasks(frozenset(self.running))]
            case JobFailed():
                return [Exit(1, f"job failed: {event.reason}")]
            case Assigned():
                return self._assigned(event, now)
            case InputRead():
                self.last_input, self.drained = now, False
                return []
            case OutputBuffered() if self.awaiting_first_output:
                # The output replayed since the restored checkpoint is what downstream
                # has been missing since the failure: publish it without waiting out
                # the interval (one checkpoint more per restore).
                self.awaiting_first_output = False
                return self._request(now, "first output after a restore")
            case StopRequested():
                return self._stop_requested(now)
            case StopJob() if event.attempt == self.attempt:
                log.info("the coordinator stops the job: %s", event.reason)
                return self._stop_requested(now)
            case TaskStopped():
                self.tasks.discard(event.task_id)
                self.running.discard(event.task_id)
                if event.reason is None:
                    return []
                return [Send(TaskFailed(event.task_id, self.member, event.attempt, event.reason))]
            case _:
                return []

    def _restore(self) -> list[Action]:
        self.tasks, self.running = set(self.assigned), set()
        ready = [
            Send(TaskReady(self.attempt, task, self.member, self.generation or 0, self.plan))
            for task in self.assigned
        ]
        return [RestoreTasks(self.attempt, self.restore_point), *ready]

    def _assigned(self, event: Assigned, now: float) -> list[Action]:
        self.member, self.generation = event.member, event.generation
        self.assigned, self.any_partitions = event.tasks, event.any_partitions
        self._next_heartbeat = 0.0  # tell the coordinator at once
        actions: list[Action]
        if self.restoring and event.any_partitions:
            actions = self._restore()  # same attempt, new generation: ready again
        else:
            self.tasks, self.running = set(), set()
            actions = [StopTasks()]
            if self.attempt > 0 and event.any_partitions:
                # The attempt is resumed, yet this worker now holds partitions of tasks
                # it does not run (a rebalance, or a restart under static membership
                # that no rebalance announces): ask for a restore now rather than
                # leave the coordinator to notice a silent owner after its timeout.
                actions += [
                    Send(TaskFailed(task, self.member, self.attempt, REASSIGNED))
                    for task in event.tasks
                ]
        return actions + self._heartbeat(now)

    def _stop_requested(self, now: float) -> list[Action]:
        if self.stopping_since is not None:
            return []
        self.stopping_since = now
        self.awaiting_first_output = False
        if self.restoring or not self.running:
            return [Exit(0, "stopping: nothing runs here, so nothing is left to commit")]
        # Input is read only after the control messages of a loop iteration, so a
        # trigger handled at this same ``now`` (e.g. right after a StopJob) covers
        # everything read: it counts as the final checkpoint.
        self.last_input, self.drained = now - 1e-6, False
        log.info("stopping: waiting for a final checkpoint of everything read")
        return []

    # ---- time ---------------------------------------------------------------------------------

    def tick(self, now: float) -> list[Action]:
        """Heartbeats, and the checkpoint requests and stops of draining and idleness."""
        if self.stopping_since is not None:
            if self.drained:
                return [Exit(0, "stopping: the final checkpoint completed")]
            if now - self.stopping_since >= self.drain_timeout_s:
                log.warning(
                    "stopping without a final checkpoint: none completed within %.0fs (a "
                    "restart replays from the last completed one)",
                    self.drain_timeout_s,
                )
                return [Exit(0, "stopping: no final checkpoint in time")]
            return self._request(now, "graceful stop") + self._heartbeat(now)
        actions = self._heartbeat(now)
        if self.stop_when_idle is not None and now - self.last_input >= self.stop_when_idle:
            if self.drained:
                return [
                    *actions,
                    Exit(0, f"no input for {now - self.last_input:.1f}s and all output committed"),
                ]
            actions += self._request(now, "idle")  # rather than wait for the interval
        return actions

    def _request(self, now: float, reason: str) -> list[Action]:
        """Ask for a checkpoint now, unless one triggered after the last input is on its
        way (repeated every second until one is triggered)."""
        if (
            self.restoring
            or now < self._next_request
            or any(t > self.last_input for t in self.trigger_seen.values())
        ):
            return []
        self._next_request = now + REQUEST_EVERY_S
        return [Send(CheckpointRequest(self.member, self.attempt, reason))]

    def _heartbeat(self, now: float) -> list[Action]:
        if now < self._next_heartbeat:
            return []
        self._next_heartbeat = now + self.heartbeat_interval
        if self.generation is None:
            return []
        return [Send(Heartbeat(self.member, tuple(sorted(self.tasks)), self.generation, self.plan))]


# ---- carrying the decisions out -------------------------------------------------------------


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
        self._pending: list[Action] = []  # decided from the history, carried out first
        self._verified: set[int] = set()  # completed checkpoints the store backs
        self._committer = SinkCommitter()

    @property
    def member(self) -> str:
        return self.source.member_id or self.label

    def start(self) -> None:
        if self.fingerprint is not None:
            publish_plan(self.store, self.app_id, self.fingerprint)
        self._pending = self.protocol.learn(self.control.read_to_end())

    def begin(self, now: float) -> int | None:
        self.control.check_outage()  # OutageExceeded past --max-outage: the job fails
        pending, self._pending = self._pending, []
        code = self._apply(pending, now)
        if code is not None:
            return code
        for msg in self.control.poll(0):
            if isinstance(msg, CheckpointCompleted) and not self.backed(msg):
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
        """Collect the sink commits that finished; acknowledge (or decline) every snapshot
        whose upload finished; then the protocol's time-driven actions."""
        self._collect_commits(now, wait=False)
        finished = [r for r in self.tasks.runners.values() if r.has_finished_upload()]
        member = self.member if finished else ""  # asks the client: only when needed
        reports = [msg for r in finished for msg in r.finished_uploads(member)]
        self.control.post_all(reports)  # not waited for: see ControlClient.post_all
        self.stats.checkpoints_acked += sum(isinstance(m, AcknowledgeCheckpoint) for m in reports)
        if self.protocol.awaiting_first_output and any(
            r.output_buffered() for r in self.tasks.running()
        ):
            code = self._handle(OutputBuffered(), now)
            if code is not None:
                return code
        return self._apply(self.protocol.tick(now), now)

    @property
    def draining(self) -> bool:
        return self.protocol.stopping

    def task_failed(self, runner: TaskRunner, reason: str) -> None:
        self._collect_commits(self.tasks.ctx.clock(), wait=True)
        self.tasks.remove(runner.task_id)
        self._handle(TaskStopped(runner.task_id, runner.attempt, reason), self.tasks.ctx.clock())

    def settle(self) -> None:
        """The worker stops: its tasks' commits finish first (a stop after the final
        checkpoint publishes its output before the process exits). A commit that fails
        now is logged: its epochs are in the checkpoint, published after a restore."""
        try:
            self._committer.collect(wait=True)
        except Exception as e:
            log.error("kstream: publishing the last completed checkpoint failed: %s", e)

    def close(self) -> None:
        self.settle()
        self._committer.close()
        self.control.close()

    def backed(self, msg: CheckpointCompleted) -> bool:
        """Whether the store backs completion ``msg`` (its metadata, of its attempt and our
        plan): anyone may write to the control topic, and acting on a forged completion
        would publish a sealed epoch early. What the store does not back is logged,
        counted and skipped."""
        n = msg.checkpoint_id
        if n in self._verified:
            return True
        why = unbacked_completion(self.store, self.app_id, n, msg.attempt, self.protocol.plan)
        if why is None:
            self._verified = {k for k in self._verified if k > n - 100} | {n}
            return True
        self.stats.unverified_control += 1
        log.warning("ignoring CheckpointCompleted(%d, attempt %d): %s", n, msg.attempt, why)
        return False

    def _handle(self, event: Event, now: float) -> int | None:
        return self._apply(self.protocol.handle(event, now), now)

    def _apply(self, actions: list[Action], now: float) -> int | None:
        """Carry ``actions`` out in order; an exit code to stop the worker."""
        unrestored: int | None = None  # an attempt whose checkpoint cannot be restored here
        failed: dict[str, str] = {}  # tasks whose restore could not reach the store/broker
        for a in actions:
            if not isinstance(a, Send | CommitSinks | TriggerTasks):  # a restore, a stop, an exit: commits first
                self._collect_commits(now, wait=True)
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
                    self.tasks.resume(self.protocol.attempt, a.owned, draining=self.draining)
                case TriggerTasks():
                    for r in self.tasks.running():
                        self.guarded(r, r.trigger, a.checkpoint_id, a.attempt, now)
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

    def _restore(self, attempt: int, checkpoint_id: int | None) -> tuple[bool, dict[str, str]]:
        """Restore every assigned task. ``(False, {})`` if some cannot restore
        ``checkpoint_id`` (each reported with ``RestoreFailed``, naming the object; none
        kept); else ``(True, unreachable)``: the tasks whose restore could not reach the
        store or the broker, with the reason (reported failed; the coordinator restores
        again)."""
        corrupt, unreachable = self.tasks.restore(attempt, checkpoint_id)
        if corrupt and checkpoint_id is not None:
            for task_id, e in sorted(corrupt.items()):
                what = getattr(e, "object", None) or ""
                self.control.report(
                    RestoreFailed(attempt, task_id, self.member, checkpoint_id, str(e)[:2000], what)
                )
            self.protocol.tasks, self.protocol.running = set(), set()
            return False, {}
        if corrupt:  # start positions cannot fail to restore: something else is wrong
            raise next(iter(corrupt.values()))
        self.stats.restores += 1
        return True, unreachable

    def _commit_sinks(self, checkpoint_id: int, now: float) -> None:
        """Start publishing every task's output up to ``checkpoint_id`` (the previous
        checkpoint's first collected); the processing goes on meanwhile."""
        self._collect_commits(now, wait=True)
        self._stop_fenced(
            self._committer.start(list(self.tasks.runners.values()), checkpoint_id), now
        )

    def _collect_commits(self, now: float, *, wait: bool) -> None:
        if self._committer.busy:
            self._stop_fenced(self._committer.collect(wait=wait), now)

    def _stop_fenced(self, fenced: dict[str, SinkFencedError], now: float) -> None:
        for task_id, e in fenced.items():  # a newer owner took these tasks over
            r = self.tasks.runners.get(task_id)
            if r is None:
                continue
            log.warning(
                "task %s: %s; stopping it here",
                task_id,
                e,
                extra=ctx(attempt=r.attempt, task=task_id),
            )
            self.tasks.remove(task_id)
            self._handle(TaskStopped(task_id, r.attempt, None), now)
