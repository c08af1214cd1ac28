"""The checkpoint coordinator: decides when to trigger, commit, abort, fail over and fail.

Pure state machine (docs/design.md §5, §6): fed control messages and a clock (epoch
seconds), it returns :mod:`~kstream.protocol.commands` for the adapter to
execute in order. No I/O, no sleeping, so every rule here is tested in
milliseconds with a fake clock.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from functools import partial
from typing import Any

from kstream.checkpointstorage.history import CheckpointFailure
from kstream.checkpointstorage.metadata import CheckpointMetadata
from kstream.config import CheckpointingConfig, RestartStrategy
from kstream.logs import ctx
from kstream.names import member_client_id
from kstream.protocol.adoption import TaskAdoption
from kstream.protocol.alignment import GlobalWatermarks
from kstream.protocol.batching import each_ready
from kstream.protocol.carrying import Carried, isolated_tasks, lost_reason
from kstream.protocol.commands import (
    Command,
    RefusePlan,
    Send,
)
from kstream.protocol.completion import CheckpointCompletion
from kstream.protocol.completionlog import CompletionLog
from kstream.protocol.elasticmessages import RELEASED_BY
from kstream.protocol.failover import FailoverController, JobPhase
from kstream.protocol.failures import CheckpointFailureManager
from kstream.protocol.handover import HANDOVER_REASONS, Handover
from kstream.protocol.membership import Membership
from kstream.protocol.messages import (
    REASSIGNED,
    AcknowledgeCheckpoint,
    AcknowledgeCheckpoints,
    AdoptRequest,
    CheckpointRequest,
    DeclineCheckpoint,
    Heartbeat,
    Message,
    Pulse,
    RestoreFailed,
    SavepointRequest,
    TaskFailed,
    TaskReady,
    TasksReady,
    TasksReleased,
    WatermarkReport,
    WorkerStopped,
)
from kstream.protocol.pending import PendingCheckpoint
from kstream.protocol.recovery import RecoveredState, predecessor_leftovers
from kstream.protocol.restorepoints import RestorePoints
from kstream.protocol.savepointrequests import SavepointRequests
from kstream.protocol.stopping import JobStopping
from kstream.protocol.triggers import TriggerSchedule

log = logging.getLogger(__name__)


class CheckpointCoordinator(CheckpointCompletion, JobStopping, TaskAdoption):
    """Triggers checkpoints for ``expected_tasks`` and commits those every task acknowledged.

    Guarantees: a checkpoint is announced complete only after its metadata was
    written (``metadata_written``); ids never repeat (they continue above
    ``recovered``); acks/declines of another attempt or an unknown checkpoint are
    ignored; nothing is triggered unless the phase is RUNNING.
    """

    def __init__(
        self,
        expected_tasks: frozenset[str],
        checkpointing: CheckpointingConfig,
        restart: RestartStrategy | None = None,
        *,
        heartbeat_timeout: float = 10.0,
        recovered: RecoveredState | None = None,
        description: dict[str, Any] | None = None,
        plan: str = "",
        cooperative: bool = False,
    ) -> None:
        if not expected_tasks:
            raise ValueError("a coordinator needs at least one task that must acknowledge")
        rec = recovered or RecoveredState()
        self.expected = frozenset(expected_tasks)
        self.config = checkpointing
        self.heartbeat_timeout = heartbeat_timeout
        # The plan fingerprint (kstream.plan.fingerprint): reports of workers with
        # another plan are refused; checkpoint metadata and Restore carry it.
        self.plan = plan
        self.failover = FailoverController(
            self.expected, restart or RestartStrategy(), rec.attempt, owners=rec.owners, plan=plan
        )
        self.foreign_plan_reports = 0
        self._restored: dict[str, tuple[int, int]] = {}  # member -> (attempt, tasks restored)
        self._refused: set[tuple[str, str]] = set()
        self.failures = CheckpointFailureManager(checkpointing.tolerable_failures)
        self.pending: dict[int, PendingCheckpoint] = {}
        self.latest_completed: CheckpointMetadata | None = rec.latest_completed
        # What the plan's state means (kstream.plan.operators.describe): in every
        # checkpoint's metadata, so a later plan can check it may restore it.
        self.description = description
        # A savepoint asked for: made of the first checkpoint with an id above ``after``.
        self.savepoints = SavepointRequests()
        # Completed checkpoints a restore may use, and those a task could not restore:
        # one global restore point, never a mix (docs/design.md §12).
        self.restore_points = RestorePoints(rec.retained, rec.latest_completed)
        self.ignored_messages = 0
        self._recovered = rec
        self._next_id = rec.max_checkpoint_id + 1
        self._completing: dict[int, CheckpointMetadata] = {}
        self.triggers = TriggerSchedule(checkpointing)  # when the next one is due
        self.members = Membership()  # heard from when, running what; stopped and why
        # Checkpoints that failed or were aborted, for the history (drained by the adapter).
        self.ended: list[CheckpointFailure] = []
        self._completions = CompletionLog()  # INFO: an attempt's first, then a minute's
        self._started = 0.0  # when start() was called
        # Global watermark alignment: the workers' reports, the bound published from them.
        self.watermarks = GlobalWatermarks(timeout=heartbeat_timeout)
        # A worker leaving or joining: a hold checkpoint first (kstream.protocol.handover).
        self.handover = Handover()
        # A silent worker's tasks carried at their last snapshot (kstream.protocol.carrying).
        self.isolated = isolated_tasks(description)
        self.carried = Carried()
        self.adopting = cooperative and self.isolated  # (kstream.protocol.adoption)

    # -- state ---------------------------------------------------------------------------

    @property
    def phase(self) -> JobPhase:
        return self.failover.phase

    @property
    def attempt(self) -> int:
        return self.failover.attempt

    @property
    def failed_reason(self) -> str | None:
        """Why the job failed hard, or None while it has not."""
        return self.failover.failure_reason if self.phase is JobPhase.FAILED else None

    @property
    def next_checkpoint_id(self) -> int:
        return self._next_id

    def take_ended(self) -> list[CheckpointFailure]:
        """Failed and aborted checkpoints since the last call (for history and metrics)."""
        ended, self.ended = self.ended, []
        return ended

    # -- inputs --------------------------------------------------------------------------

    def start(self, now: float, silent: Mapping[str, float] | None = None) -> list[Command]:
        """Continue from the recovered history; call once before ``handle``/``tick``.
        ``silent``: this coordinator took over from a silent host (docs/design.md §6.8):
        the workers its candidate saw silent, with their silence in seconds."""
        rec = self._recovered
        self._started = now
        self.triggers.interval_from(now)
        # 1. A lost announcement again; 2. the predecessor's unfinished checkpoints aborted.
        cmds, ended = predecessor_leftovers(rec, self.latest_completed, now)
        self.ended += ended
        # A task given away that the predecessor did not act on (it was on the worker
        # that was lost, typically): its owner has not been heard by this coordinator.
        report = rec.unhandled_report
        if report is not None and report.reason == REASSIGNED:
            owner = rec.owners.get(report.task_id)
            owned = sorted(t for t, m in rec.owners.items() if m == owner)
            rec.unhandled_failure = self.members.reassigned(
                report.task_id, report.member, owner, owned, now
            )
        # Owners that never heartbeat to this coordinator are lost after the timeout.
        self.members.expect(rec.owners, now)
        if self.adopting:  # (every worker pulses: one that never does here is silent)
            self.members.expect_pulses(
                {m for m in rec.owners.values() if not m.startswith(RELEASED_BY)}, now, silent
            )
        # 3. A job that was running keeps running in its attempt; one that was
        #    restoring, failed, stopped, or had an unhandled task failure is restored anew.
        cmds += self.failover.continue_from(rec, now)
        if silent is not None and self.phase is JobPhase.RUNNING:
            # Every task's output has waited since the dead host's last completion: the
            # first checkpoint now, not an interval after this start.
            self.triggers.request()
        return cmds

    def handle(self, msg: Message, now: float) -> list[Command]:
        """React to one control message from a worker; coordinator messages are ignored."""
        if isinstance(msg, WorkerStopped):
            return self._on_worker_stopped(msg, now)
        if self.phase is JobPhase.STOPPED and isinstance(msg, Heartbeat):
            return self._restart_stopped(msg, now)
        if self.phase in (JobPhase.FAILED, JobPhase.STOPPED):
            return []
        match msg:
            case AcknowledgeCheckpoint():
                return self._on_acks(
                    msg.checkpoint_id, msg.attempt, {msg.task_id: msg.snapshot}, now
                )
            case AcknowledgeCheckpoints():
                return self._on_acks(msg.checkpoint_id, msg.attempt, msg.snapshots, now, msg.member)
            case AdoptRequest():
                return self._on_adopt_request(msg, now)
            case TasksReleased():
                return self._on_release(msg, now)
            case DeclineCheckpoint():
                p = self._pending_for(msg.checkpoint_id, msg.attempt)
                if p is None:
                    return []
                reason = (
                    f"checkpoint {p.checkpoint_id} declined by task {msg.task_id}: {msg.reason}"
                )
                return self._abort(p, reason, now, counts=True)
            case TaskReady() | TasksReady() | Heartbeat() if self.plan and msg.plan != self.plan:
                return self._refuse_plan(msg.member, msg.plan)
            case TaskReady() | TasksReady():
                if msg.member in self.members.stopped:
                    return []  # it stopped, or leaves during this restore (stopping.py)
                ready = [cmd for one in each_ready(msg) for cmd in self.failover.on_ready(one)]
                return self._resumed(ready, now)
            case Heartbeat():
                return self._on_heartbeat(msg, now)
            case Pulse():
                self.members.pulse(msg.member, now)
                if self.phase is not JobPhase.RUNNING:
                    return []
                return self._carried_heard(msg.member, now)
            case CheckpointRequest() if self.phase is JobPhase.RESTORING:
                return self._request_in_restore(msg, now)
            case CheckpointRequest():
                if msg.attempt == self.attempt and self.phase is JobPhase.RUNNING:
                    log.info("checkpoint requested by %s: %s", msg.member, msg.reason)
                    if msg.reason in HANDOVER_REASONS:
                        return self._hand_over(msg.member, msg.reason, now)
                    self.triggers.request()
                return []
            case SavepointRequest():
                return self._on_savepoint_request(msg)
            case RestoreFailed():
                return self._on_restore_failed(msg, now)
            case WatermarkReport():
                self.watermarks.report(msg, self.attempt, now)
                return []
            case TaskFailed():
                if msg.attempt != self.attempt:
                    return []  # a failure of a superseded attempt is already handled
                if msg.reason == REASSIGNED:
                    return self._fail_over(self._reassigned(msg, now), now)
                return self._fail_over(
                    f"task {msg.task_id} failed on {msg.member}: {msg.reason}", now
                )
            case _:
                return []  # written by a coordinator (ours or a predecessor's)

    def tick(self, now: float) -> list[Command]:
        """Time passes: time out checkpoints, detect lost workers, restore, trigger."""
        if self.phase in (JobPhase.FAILED, JobPhase.STOPPED):
            return []
        cmds: list[Command] = []
        ran = partial(self.members.last_runners, now=now)  # where missing tasks last ran
        # 1. Time-outs first: a timed-out checkpoint frees its slot for a new trigger.
        for p in list(self.pending.values()):
            if now - p.trigger_time >= self.config.timeout and self.phase is not JobPhase.FAILED:
                reason = p.timeout_reason(self.config.timeout, ran)
                cmds += self._abort(p, reason, now, counts=True)
        cmds += self._carry_silent(now)  # (before they are lost: kstream.protocol.carrying)
        # 2. Workers whose heartbeats stopped are lost: the tasks they own must move
        #    (a silent member that owns nothing in this attempt — a predecessor of a
        #    restarted worker — is forgotten without a restore).
        for member, silence in self.members.silent(self.heartbeat_timeout, now, self._loss_grace()):
            owned = self.failover.held_by(member)
            if owned:
                cmds += self._fail_over(lost_reason(member, silence, owned), now)
        if self.handover.expired(now):
            log.warning(
                "hand-over: the group did not change within %.0fs of the hold checkpoint: "
                "the tasks go on from where they held",
                self.handover.timeout,
            )
        # 3. A scheduled restore starts, or one that took too long starts over; joiners
        #    that never came are awaited no more.
        cmds += self.failover.tick(now, self.restore_points.choose())
        cmds += self._resumed(self.failover.joiners_expired(now), now)
        # 4. Trigger.
        if self._may_trigger(now):
            cmds.append(self._trigger(now))
        # 5. The global watermark alignment's bound, while the job runs.
        if self.phase is JobPhase.RUNNING:
            owners = self.failover.by_member().keys()
            bound = self.watermarks.tick(self.attempt, now, owners)
            cmds += [Send(bound)] if bound is not None else []
        return cmds

    def cut_off(self, now: float) -> None:
        """This coordinator could not reach the brokers until ``now`` (its own outage).

        The workers' heartbeats could not reach it either: their silence so far says
        nothing about them, so each member is counted as heard from at ``now`` and
        is lost only after a whole ``heartbeat_timeout`` more without a heartbeat.
        """
        self.members.cut_off(now)

    # -- decisions -----------------------------------------------------------------------

    def _may_trigger(self, now: float) -> bool:
        due = self._trigger_due()
        return due is not None and now >= due

    def next_trigger_in(self, now: float) -> float | None:
        """Seconds until ``tick`` triggers a checkpoint (0: due now); None while a message
        must come first (a checkpoint in flight blocks the next, or the job is not
        running). Polling no longer than this starts checkpoints on time instead of up
        to a poll timeout late."""
        due = self._trigger_due()
        return None if due is None else max(0.0, due - now)

    def _trigger_due(self) -> float | None:
        """When the next checkpoint may be triggered (None: not until something happens):
        an interval after the last trigger, at once when a worker asked for one."""
        if self.phase is not JobPhase.RUNNING or self.handover.blocks_triggers:
            return None
        return self.triggers.due(len(self.pending) + len(self._completing))

    def _on_restore_failed(self, msg: RestoreFailed, now: float) -> list[Command]:
        """A task cannot restore the current restore point: every task restores the next
        older retained checkpoint instead (said once, loudly); none left: the job fails."""
        n = self.failover.restore_point
        if (
            self.phase is not JobPhase.RESTORING
            or msg.attempt != self.attempt
            or msg.checkpoint_id != n
            or n is None
        ):
            self.ignored_messages += 1
            return []
        reason, older = self.restore_points.failed(n, msg)
        if older is None:
            return self.failover.fail(reason)
        return self._fail_over(reason, now)

    def _refuse_plan(self, member: str, plan: str) -> list[Command]:
        """A report from a worker with another plan: ignored, counted, reported once."""
        self.foreign_plan_reports += 1
        if (member, plan) in self._refused:
            return []
        self._refused.add((member, plan))
        return [RefusePlan(plan, member=member)]

    def _reassigned(self, msg: TaskFailed, now: float) -> str:
        owner = self.failover.owners.get(msg.task_id)
        owned = self.failover.held_by(owner) if owner else []
        return self.members.reassigned(msg.task_id, msg.member, owner, owned, now)

    def _on_heartbeat(self, hb: Heartbeat, now: float) -> list[Command]:
        self.members.heard(hb.member, hb.tasks, now, hb.producer)
        previous = self.failover.generation
        self.failover.observe_generation(hb.generation)
        if hb.restored and self.phase is JobPhase.RESTORING:
            progress = (self.attempt, hb.restored)
            if progress > self._restored.get(hb.member, (-1, 0)):
                self._restored[hb.member] = progress
                self.failover.progressed(now)  # the restore moves: its deadline too
        if self.phase is JobPhase.RESTORING:
            joiner = member_client_id(hb.member)  # it asked before it had a member id
            return self._resumed(self.failover.joiner_heard(joiner, hb.generation), now)
        if self.phase is not JobPhase.RUNNING:
            return []
        heard = self._carried_heard(hb.member, now)  # (it was stalled, not dead)
        if self.phase is not JobPhase.RUNNING:
            return heard  # (it failed over)
        self._adopter_runs(self.attempt, hb.member, hb.tasks)
        moved = self._moved(hb, previous, now)
        if moved is None:
            return heard
        reason, normal = moved
        return heard + self._fail_over(reason, now, normal=normal)

    def _fail_over(self, reason: str, now: float, *, normal: bool = False) -> list[Command]:
        """Suspend: abort every checkpoint in flight (not counted), then schedule a restore.

        ``normal``: an expected event (a worker rejoining), logged as such, not as a fault.
        """
        self.carried.clear()  # (every task restores)
        if self.phase in (JobPhase.SUSPENDED, JobPhase.FAILED):
            return []
        if self.handover.holding:
            normal = True  # the change a hand-over checkpoint prepared (§6.6)
            reason = f"hand-over at checkpoint {self.handover.checkpoint_id}: {reason}"
        if normal:
            log.info(
                "restart (attempt %d -> %d): %s",
                self.attempt,
                self.attempt + 1,
                reason,
                extra=ctx(attempt=self.attempt),
            )
        else:
            log.warning(
                "failover (attempt %d -> %d): %s",
                self.attempt,
                self.attempt + 1,
                reason,
                extra=ctx(attempt=self.attempt),
            )
        cmds: list[Command] = []
        for p in list(self.pending.values()):
            cmds += self._abort(p, f"job failover: {reason}", now, counts=False)
        # After a hold checkpoint the change is the expected hand-over: restored at
        # once, not counted as a restart (docs/design.md §6.6).
        at_once = self.handover.changed()
        return cmds + self.failover.on_failure(reason, now, at_once=at_once)
