"""The worker's half of the control protocol (docs/design.md §5-§7): what it decides. The
checkpointed mode that carries those decisions out: :mod:`kstream.worker.checkpointed`.

:class:`WorkerProtocol` is a pure state machine: ``handle(message, now)`` and
``tick(now)`` return commands, in order; it does no I/O and is tested with a fake
clock. Messages are the coordinator's (``Restore``, ``Resume``, ``TriggerCheckpoint``,
``CheckpointCompleted``, ``JobFailed``) and what the loop observes itself
(:class:`Assigned`, :class:`InputRead`, :class:`StopRequested`, :class:`TaskStopped`,
:class:`Unrestorable`, :class:`QueriesServed`).
:class:`~kstream.worker.checkpointed.Checkpointed` (the worker's default mode, :mod:`kstream.worker.mode`) feeds it
the control topic and the loop's observations and carries its commands out against the
worker's tasks, the control topic and the checkpoint store.

One checkpoint, as this module sees it: ``TriggerCheckpoint`` -> :class:`TriggerTasks`
-> each running task's runner injects the barrier and, at its snapshot point, takes
the snapshot and uploads it (:mod:`kstream.worker.runner`) -> the finished upload's
``AcknowledgeCheckpoint`` goes out (``Checkpointed.end``) -> the coordinator's
``CheckpointCompleted``, once the store backs it -> :class:`CommitSinks` -> each
runner publishes its sinks' output for that checkpoint.

What the protocol decides:

* **restore and resume**: tasks run only in an attempt the coordinator resumed with
  this worker as their owner. ``Restore(attempt, n)`` rolls every assigned task back
  to checkpoint *n* and reports them ready (``TasksReady``: one message for all); ``Resume(attempt, owners)``
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
from collections.abc import Callable, Iterable

from kstream.logs import ctx
from kstream.protocol.adoptrequests import AdoptRequests, WorkerAdoption
from kstream.protocol.batching import ResumeParts, readies
from kstream.protocol.commands import RefusePlan, Send
from kstream.protocol.handover import HOLD_TIMEOUT_S, JOINING, LEAVING
from kstream.protocol.messages import (
    REASSIGNED,
    Adopt,
    CheckpointAborted,
    CheckpointCompleted,
    CheckpointRequest,
    HandoverDeclined,
    Heartbeat,
    JobFailed,
    JobStopped,
    Message,
    Restore,
    Resume,
    StopJob,
    TaskFailed,
    TriggerCheckpoint,
    WorkerStopped,
)
from kstream.protocol.workerevents import (
    Assigned,
    CommitSinks,
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

log = logging.getLogger(__name__)

REQUEST_EVERY_S = 1.0  # a checkpoint request is repeated this often until one is triggered
# A worker told to stop during a restore asks the coordinator whether it may leave at
# once; a coordinator that does not answer within this (one from before that answer,
# or none) is not waited for longer: it leaves then, as it did at once before.
LEAVE_ANSWER_S = 3.0
# Tasks holding after a hand-over checkpoint that no restore, trigger or abort followed
# for this long after its trigger or its completion (the coordinator gone with the
# leaver, say) go on by themselves (the coordinator waits HOLD_TIMEOUT_S after it).
HOLD_MAX_S = 2 * HOLD_TIMEOUT_S


class WorkerProtocol(WorkerAdoption):
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
        client_id: str = "",
        cooperative: bool = False,
        producer: str = "",
    ) -> None:
        self.member = member
        # The group assigns cooperatively: a rebalance that only gives this worker
        # partitions leaves its tasks running, and it asks to adopt the new ones (§6.8).
        self.cooperative = cooperative
        self.producer = producer if cooperative else ""  # (heartbeats: fenced when adopted)
        # The group consumer's client.id (``host:pid``), which the member id the group
        # gives it starts with: a joiner asks under it, before it has a member id.
        self.client_id = client_id or member
        # This worker's plan fingerprint (kstream.plan.fingerprint): in its reports, and
        # compared with the coordinator's on every Restore.
        self.plan = plan
        self.query = ""  # this worker's query endpoint, announced in its heartbeats
        self.generation: int | None = None
        self.heartbeat_interval = heartbeat_interval
        self.stop_when_idle = stop_when_idle
        self.drain_timeout_s = drain_timeout_s
        # Learnt from the control topic.
        self.attempt = 0
        self.restore_point: int | None = None
        self.restoring = False  # a Restore of ``attempt`` is pending its Resume
        # The history ends with a Restore or a Resume, not a stop: the job is live (§6.6).
        self.job_live = False
        # This worker's tasks.
        self.assigned: tuple[str, ...] = ()
        self.any_partitions = False
        self.tasks: set[str] = set()  # held here (restored or running)
        self.running: set[str] = set()
        # Draining and idleness.
        self.last_input = now
        self.drained = False  # a checkpoint triggered after the last input completed
        self.stopping_since: float | None = None
        self.final_after = -1  # the final checkpoint's id is above this (a savepoint's)
        self.trigger_seen: dict[int, float] = {}
        # The hand-over checkpoint whose trigger said hold, and since when (§6.6).
        self.hold: tuple[int, float] | None = None
        self._hold_completed: int | None = None  # the last hold checkpoint that completed
        # Resumed from a checkpoint and no output buffered since: the first output
        # asks for a checkpoint at once (OutputBuffered).
        self.awaiting_first_output = False
        self._next_request = 0.0
        self._adoption = AdoptRequests()  # asked, not answered yet (§6.8)
        self._released: set[str] = set()
        self._leave_asked: tuple[int, float] | None = None  # during a restore: attempt, when
        self._next_heartbeat = 0.0
        self._resumes = ResumeParts()  # a Resume written in parts, put together

    def learn(self, history: Iterable[Message]) -> list[WorkerCommand]:
        """The control topic read to its end: the current attempt and whether it resumed
        (no commands: kept a list for what a history may require)."""
        history = list(history)
        self.catch_up(history)
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

    def catch_up(self, messages: Iterable[Message]) -> None:
        """What ``messages`` (read before this worker joined the group) say of the job:
        its attempt, whether it resumed, whether it is live."""
        for part in messages:
            msg = self._resumes.whole(part)
            if isinstance(msg, Restore) and msg.attempt >= self.attempt:
                self.attempt, self.restore_point, self.restoring = (
                    msg.attempt,
                    msg.checkpoint_id,
                    True,
                )
            elif isinstance(msg, Resume) and msg.attempt == self.attempt:
                self.restoring = False
            if isinstance(msg, Restore | Resume | JobStopped | JobFailed):
                self.job_live = isinstance(msg, Restore | Resume)

    def _foreign(self, msg: Restore) -> bool:
        """Whether the coordinator that wrote ``msg`` runs another plan than this worker."""
        return bool(self.plan and msg.plan and msg.plan != self.plan)

    @property
    def stopping(self) -> bool:
        """Stopping gracefully: no more user input is read."""
        return self.stopping_since is not None

    # ---- messages and observations -------------------------------------------------------

    def handle(self, event: Event, now: float) -> list[WorkerCommand]:
        if isinstance(event, Resume):
            whole = self._resumes.add(event)
            if whole is None:
                return []  # more parts to come
            event = whole
        match event:
            case TriggerCheckpoint() if event.attempt == self.attempt:
                self.trigger_seen[event.checkpoint_id] = now
                # A trigger after a hold: the coordinator stopped waiting for a change.
                release = self._release(lambda n: n < event.checkpoint_id)
                if event.hold:
                    self.hold = (event.checkpoint_id, now)
                return [*release, TriggerTasks(event.checkpoint_id, event.attempt, event.hold)]
            case CheckpointAborted():
                return self._release(lambda n: n == event.checkpoint_id)
            case CheckpointCompleted():
                if self.hold is not None and self.hold[0] == event.checkpoint_id:
                    self.hold = (event.checkpoint_id, now)  # HOLD_MAX_S from here
                    self._hold_completed = event.checkpoint_id
                after_input = self.trigger_seen.get(event.checkpoint_id, float("-inf"))
                if after_input > self.last_input and event.checkpoint_id > self.final_after:
                    self.drained = True
                self.trigger_seen = {
                    k: v for k, v in self.trigger_seen.items() if k > event.checkpoint_id
                }
                return [CommitSinks(event.checkpoint_id)]
            case Restore() if event.attempt > self.attempt and self._foreign(event):
                return [RefusePlan(event.plan, attempt=event.attempt)]
            case Restore() if event.attempt > self.attempt:
                self._adoption.clear()
                self.attempt, self.restore_point, self.restoring = (
                    event.attempt,
                    event.checkpoint_id,
                    True,
                )
                held, self.hold = self.hold is not None, None  # every task is restored
                log.info(
                    "restore: attempt %d from checkpoint %s",
                    event.attempt,
                    event.checkpoint_id,
                    extra=ctx(attempt=event.attempt),
                )
                if self.any_partitions:
                    return self._restore()
                self.tasks, self.running = set(), set()
                # (Read between an eager rebalance's revocation and its assignment: tasks
                # holding at the restored checkpoint carry on once it comes, §6.6.)
                return [StopTasks(keep_held=held)]
            case Resume() if event.attempt == self.attempt and self.restoring:
                self.restoring = False
                self.last_input, self.drained = now, False  # idle counts from here
                self.running = {t for t in self.tasks if event.owners.get(t) == self.member}
                others = self.tasks - self.running
                self.tasks = set(self.running)  # another member owns the rest: stay idle
                self.awaiting_first_output = bool(self.running) and self.restore_point is not None
                return [ResumeTasks(frozenset(self.running)), *self._ask_unowned(others, now)]
            case Adopt() if event.attempt == self.attempt:
                return self._on_adopt(event, now)
            case HandoverDeclined() if (
                event.member == self.member and self.stopping and self.restoring
            ):
                # The coordinator read our leave during the restore: the Resume waits
                # for the group's change and will not name us.
                return self._exit_from_restore("")
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
                self.final_after = max(self.final_after, event.after)
                return self._stop_requested(now)
            case Unrestorable():
                self.tasks, self.running = set(), set()
                return []
            case QueriesServed():
                self.query = event.url
                return []
            case TaskStopped():
                self.tasks.discard(event.task_id)
                self.running.discard(event.task_id)
                if event.reason is None:
                    return []
                return [Send(TaskFailed(event.task_id, self.member, event.attempt, event.reason))]
            case _:
                return []

    @property
    def held_at_completed(self) -> int | None:
        """The completed hand-over checkpoint this worker's tasks hold at, with no restore
        since (None otherwise): everything they did is in it and published, and they
        do nothing more until a restore or a release."""
        if self.hold is None or self.restoring or self._hold_completed != self.hold[0]:
            return None
        return self.hold[0]

    def _release(self, which: Callable[[int], bool]) -> list[WorkerCommand]:
        """Release the hold if its checkpoint is ``which``."""
        if self.hold is None or not which(self.hold[0]):
            return []
        n, self.hold = self.hold[0], None
        log.info("hand-over checkpoint %d: the tasks go on from where they held", n)
        return [ReleaseTasks(n)]

    def join_request(self) -> list[WorkerCommand]:
        """Before this worker joins the group of a running job: ask for a hand-over
        checkpoint, so the change its join brings re-processes nothing (§6.6)."""
        return [Send(CheckpointRequest(self.client_id, self.attempt, JOINING))]

    def _restore(self) -> list[WorkerCommand]:
        self.tasks, self.running = set(self.assigned), set()
        ready = readies(self.attempt, self.assigned, self.member, self.generation or 0, self.plan)
        return [RestoreTasks(self.attempt, self.restore_point), *map(Send, ready)]

    def _assigned(self, event: Assigned, now: float) -> list[WorkerCommand]:
        released = self._take_released()  # (in the revocation: kstream.protocol.adoptrequests)
        return released + self._assignment(event, now)

    def _assignment(self, event: Assigned, now: float) -> list[WorkerCommand]:
        adopts = self._adopts(event)
        self._adoption.clear()
        self.member, self.generation = event.member, event.generation
        self.assigned, self.any_partitions = event.tasks, event.any_partitions
        self._next_heartbeat = 0.0  # tell the coordinator at once
        commands: list[WorkerCommand]
        if adopts:
            return [*self._ask_adoption(event, now), *self._heartbeat(now)]
        if self.restoring and event.any_partitions:
            commands = self._restore()  # same attempt, new generation: ready again
        else:
            self.tasks, self.running = set(), set()
            commands = [StopTasks(keep_held=self.hold is not None)]
            if self.attempt > 0 and event.any_partitions:
                # The attempt is resumed, yet this worker now holds partitions of tasks
                # it does not run (a rebalance, or a restart under static membership
                # that no rebalance announces): ask for a restore now rather than
                # leave the coordinator to notice a silent owner after its timeout.
                commands += [
                    Send(TaskFailed(task, self.member, self.attempt, REASSIGNED))
                    for task in event.tasks
                ]
        return commands + self._heartbeat(now)

    def _stop_requested(self, now: float) -> list[WorkerCommand]:
        if self.stopping_since is not None:
            return []
        self.stopping_since = now
        self.awaiting_first_output = False
        if self.restoring and self.any_partitions:
            return self._leave_during_restore(now)
        if not self.running:
            return self._exit("stopping: nothing runs here, so nothing is left to commit")
        # Input is read only after the control messages of a loop iteration, so a
        # trigger handled at this same ``now`` (e.g. right after a StopJob) covers
        # everything read: it counts as the final checkpoint.
        self.last_input, self.drained = now - 1e-6, False
        log.info("stopping: waiting for a final checkpoint of everything read")
        return []

    # ---- time ---------------------------------------------------------------------------------

    def tick(self, now: float) -> list[WorkerCommand]:
        """Heartbeats, and the checkpoint requests and stops of draining and idleness."""
        if self.stopping_since is not None:
            if self.restoring and self.any_partitions:  # (drained or not: nothing ran)
                return self._leave_during_restore(now) + self._heartbeat(now)
            if self.drained:
                return self._exit("stopping: the final checkpoint completed")
            held = self.held_at_completed
            if held is not None and held > self.final_after:
                # Told to stop while holding at a completed hand-over checkpoint (another
                # worker's, or its own asked before the stop): that checkpoint is its
                # final one. Leaving now, its change joins the one the hold prepared —
                # one restore for both, as when two workers are stopped together.
                return self._exit(
                    f"stopping: the final checkpoint completed (its tasks hold at hand-over "
                    f"checkpoint {held})"
                )
            if now - self.stopping_since >= self.drain_timeout_s:
                log.warning(
                    "stopping without a final checkpoint: none completed within %.0fs (a "
                    "restart replays from the last completed one)",
                    self.drain_timeout_s,
                )
                return self._exit("stopping: no final checkpoint in time")
            return self._request(now, LEAVING) + self._heartbeat(now)
        commands = [*self._heartbeat(now), *self._adoption.due(now)]
        if self.hold is not None and now - self.hold[1] >= HOLD_MAX_S:
            commands += self._release(lambda n: True)
        if self.stop_when_idle is not None and now - self.last_input >= self.stop_when_idle:
            if self.drained:
                idle = now - self.last_input
                return commands + self._exit(f"no input for {idle:.1f}s and all output committed")
            commands += self._request(now, "idle")  # rather than wait for the interval
        return commands

    def _leave_during_restore(self, now: float) -> list[WorkerCommand]:
        """Told to stop during a restore: no task ran since the checkpoint restored, so
        this worker's change can join the restore in progress. But the coordinator may
        have written the Resume (every task ready) that this worker has not read yet:
        leaving then would roll every task that ran since back. So it asks (LEAVING) and
        leaves when the coordinator answers that it read the request while restoring
        (``HandoverDeclined``: the Resume waits for the group's change); a Resume read
        first makes it a running worker, which hands over at a hold checkpoint. Asked
        again for a new attempt; left when no answer came within LEAVE_ANSWER_S, or
        restores kept coming for the whole drain timeout."""
        asked = self._leave_asked
        waited = now - (self.stopping_since or now)
        if (asked is None or asked[0] != self.attempt) and waited < self.drain_timeout_s:
            self._leave_asked = (self.attempt, now)
            return [Send(CheckpointRequest(self.member, self.attempt, LEAVING))]
        if asked is not None and asked[0] == self.attempt and now - asked[1] < LEAVE_ANSWER_S:
            return []
        return self._exit_from_restore(
            f" (no answer from the coordinator within {LEAVE_ANSWER_S:g}s)"
        )

    def _exit_from_restore(self, note: str) -> list[WorkerCommand]:
        return self._exit(
            f"stopping: during the restore of checkpoint {self.restore_point}, nothing ran "
            f"since it{note}"
        )

    def _exit(self, reason: str) -> list[WorkerCommand]:
        """Exit 0, telling the coordinator first: a stopped worker is not a lost one, and
        `kstream status` says the job stopped, when and why."""
        stopped = WorkerStopped(self.member, self.attempt, reason)
        return [Send(stopped), Exit(0, reason)]

    def _request(self, now: float, reason: str) -> list[WorkerCommand]:
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

    def heartbeat(self, now: float) -> list[WorkerCommand]:
        """The heartbeat due at ``now``, if any, and nothing else: what a worker sends
        between the parts of long work on its loop (triggering hundreds of tasks), so
        that the coordinator does not declare it lost. (While the loop waits on the
        cluster, kstream.worker.keepalive sends ``current_heartbeat`` instead.)"""
        return self._heartbeat(now)

    def _heartbeat(self, now: float) -> list[WorkerCommand]:
        if now < self._next_heartbeat:
            return []
        self._next_heartbeat = now + self.heartbeat_interval
        hb = self.current_heartbeat()
        return [] if hb is None else [Send(hb)]

    def current_heartbeat(self) -> Heartbeat | None:
        """The heartbeat this worker sends now (None before it has a group generation)."""
        if self.generation is None:
            return None
        tasks = tuple(sorted(self.tasks))
        return Heartbeat(
            self.member, tasks, self.generation, self.plan, self.query, producer=self.producer
        )
