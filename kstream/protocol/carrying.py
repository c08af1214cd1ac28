"""A crashed worker's tasks carried at their last completed snapshot, so the others go
on (docs/design.md §6.7; part of :class:`kstream.protocol.coordinator.CheckpointCoordinator`,
a base class of it). Pure, fed messages and a clock.

In a job whose tasks exchange no records (no ``key_by``: no internal topic), a task's
snapshot is consistent with any other task's, whatever checkpoint each was taken at. So
when a worker owning tasks falls silent (``CARRY_AFTER_S``, killed or frozen), the
coordinator does not wait for its acknowledgements nor roll every task back:

* **Carried.** Its tasks' snapshots of the latest completed checkpoint stand for them in
  the checkpoints in flight and in every later one, so checkpoints keep completing and
  the other workers keep publishing. A carried task's snapshot is the state and input
  positions it had then: what it read after them is still in Kafka, and what it emitted
  after them was never published (exactly-once output is published at completions).
* **Not published twice.** A worker publishes, at a completion, only the tasks whose
  snapshot in that checkpoint's metadata is one of that checkpoint (the handle names
  it): a carried worker that was only stalled or frozen, and wakes up, publishes nothing
  of its tasks for those completions (``kstream.worker.checkpointed``). Its next
  heartbeat ends the carry (``_carried_heard``): the completions after it publish what
  its tasks did meanwhile — or, once the hold checkpoint is triggered, every task
  restores.
* **A hand-over at the group's change.** The group gives the silent worker's
  partitions to the others after its session times out, and the coordinator counts it
  lost after ``heartbeat_timeout``; whichever comes first is a restore. Shortly before
  (``hold_lead``), a hold checkpoint is triggered (:mod:`kstream.protocol.handover`): the
  others' tasks snapshot and hold, so that restore is a hand-over at that checkpoint —
  they carry on where they held, nothing is processed twice, and only the carried
  tasks restore, from their carried snapshots. When the change comes before the hold
  completed, the restore is the ordinary one, to the latest completed checkpoint.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from kstream.checkpointstorage.metadata import CheckpointMetadata, TaskSnapshot
from kstream.protocol.commands import Command
from kstream.protocol.elasticmessages import RELEASED_BY
from kstream.protocol.failover import FailoverController, JobPhase
from kstream.protocol.handover import HEARD_WITHIN_S, Handover
from kstream.protocol.membership import Membership
from kstream.protocol.restorepoints import RestorePoints
from kstream.protocol.triggers import TriggerSchedule

if TYPE_CHECKING:
    from kstream.protocol.pending import PendingCheckpoint

log = logging.getLogger(__name__)

CARRY_AFTER_S = HEARD_WITHIN_S
"""An owner silent this long has its tasks carried (a busy worker heartbeats every
second even while it restores or publishes: kstream.worker.keepalive)."""

PULSED_CARRY_S = 1.0
"""A member that pulses (cooperative assignment: ``Pulse`` from a thread of its own every
quarter second, whatever its loop does) has its tasks carried after this much silence."""

STALL_S = 0.5
"""Ticks this far apart mean the coordinator itself stalled (its loop ticks every 50 ms):
what the workers wrote meanwhile is not read yet, so nobody's silence is judged at such
a tick — the next one comes after that read."""

MIN_HOLD_LEAD_S = 1.5
"""The hold checkpoint is triggered at least this long before the expected change."""


def lost_reason(member: str, silence: float, owned: Iterable[str]) -> str:
    """Why ``member``'s tasks ``owned`` are restored: it went silent, or (tasks a worker
    released) no worker adopted them."""
    tasks = ", ".join(owned)
    if member.startswith(RELEASED_BY):
        return f"tasks {tasks} {member} were not adopted within {silence:.1f}s"
    return f"worker {member} lost: no heartbeat for {silence:.1f}s (tasks {tasks})"


def isolated_tasks(description: dict[str, Any] | None) -> bool:
    """Whether the plan's tasks exchange no records (no internal topic): only then is a
    task's older snapshot consistent with the others' newer ones."""
    return description is not None and not description.get("internal_topics")


class Carried:
    """Which tasks are carried, at which snapshot, for which silent member."""

    def __init__(self) -> None:
        self.snapshots: dict[str, TaskSnapshot] = {}
        self.members: dict[str, tuple[str, ...]] = {}  # member -> its carried tasks
        self.hold_at: float | None = None  # when to trigger the hold checkpoint
        # Tasks adopted (kstream.protocol.adoption) -> their adopter: carried still until a
        # checkpoint completes with the adopter's own snapshot of them.
        self.adopted: dict[str, str] = {}
        # Adopted tasks their adopter runs now (a heartbeat of its naming them, sent once
        # it restored them, or an acknowledgement of them): the checkpoints triggered
        # from then on wait for its snapshots — else, with an adopter whose
        # acknowledgements come after the others', every checkpoint would complete with
        # the carried one and the task's output would never be published.
        self.running: set[str] = set()
        # A carried member -> the tasks it was adopting when it fell silent (-> itself):
        # adopted again should it be heard again (a false alarm mid-adoption).
        self.adopting: dict[str, dict[str, str]] = {}
        self.judged_at = float("-inf")  # the last tick that judged silences (STALL_S)
        # Carried before any checkpoint completed (no snapshot: at the start positions),
        # not adopted yet: their new owner starts them afresh (kstream.protocol.adoption).
        self.fresh: set[str] = set()

    def clear(self) -> None:
        self.snapshots, self.members, self.hold_at, self.adopted = {}, {}, None, {}
        self.running, self.adopting, self.fresh = set(), {}, set()

    def fill(self, p: PendingCheckpoint) -> None:
        """The carried tasks' snapshots in ``p``, where their own did not come (not those
        of adopted tasks their adopter runs now)."""
        for task, snapshot in self.snapshots.items():
            if task not in self.running:
                p.acks.setdefault(task, snapshot)

    def refresh(self, meta: CheckpointMetadata, pending: Iterable[PendingCheckpoint]) -> None:
        """Checkpoint ``meta`` completed. A carried task it has a newer snapshot of (its
        owner acknowledged it before it fell silent) is carried at that one from now on,
        in the checkpoints in flight after it too: a later checkpoint never carries a
        task at an older snapshot than an earlier one. An adopted task it has its
        adopter's snapshot of is carried no more."""
        later = [p for p in pending if p.checkpoint_id > meta.checkpoint_id]
        for task in [t for t in self.adopted if t not in self.snapshots and t in meta.tasks]:
            del self.adopted[task]  # (adopted afresh: this is its adopter's first snapshot)
            self.running.discard(task)
        for task, old in list(self.snapshots.items()):
            new = meta.tasks.get(task)
            if new is None or new.handle == old.handle:
                continue
            if task in self.adopted:
                del self.adopted[task], self.snapshots[task]
                self.running.discard(task)
                continue
            self.snapshots[task] = new
            for p in later:
                if p.acks.get(task) is old:
                    p.acks[task] = new


def hold_lead(latest: CheckpointMetadata) -> float:
    """How long before the expected change to trigger the hold: twice the last
    checkpoint's duration and half a second, at least ``MIN_HOLD_LEAD_S``."""
    return max(MIN_HOLD_LEAD_S, 2.0 * (latest.complete_time - latest.trigger_time) + 0.5)


class CrashCarrying:
    """Carrying a silent worker's tasks (see the module)."""

    isolated: bool
    adopting: bool
    carried: Carried
    heartbeat_timeout: float
    latest_completed: CheckpointMetadata | None
    restore_points: RestorePoints
    pending: dict[int, PendingCheckpoint]
    failover: FailoverController
    triggers: TriggerSchedule
    members: Membership
    handover: Handover

    @property
    def phase(self) -> JobPhase:
        raise NotImplementedError

    def _complete(self, p: PendingCheckpoint, now: float) -> list[Command]:
        raise NotImplementedError

    def _fail_over(self, reason: str, now: float, *, normal: bool = False) -> list[Command]:
        raise NotImplementedError

    def _abort(
        self, p: PendingCheckpoint, reason: str, now: float, *, counts: bool
    ) -> list[Command]:
        raise NotImplementedError

    def _unrestorable_latest(self) -> str:
        """Why no task can be carried now ("" if they can): the latest completed
        checkpoint is one a task could not restore — the job fell back past it and none
        completed since — so its snapshots are not where the tasks' state is."""
        latest = self.latest_completed
        if latest is None or latest.checkpoint_id not in self.restore_points.unrestorable:
            return ""
        return f"the latest completed checkpoint {latest.checkpoint_id} cannot be restored"

    def _carry_fresh(self, tasks: Iterable[str], now: float) -> list[Command]:
        """``tasks`` carried before any checkpoint completed: their new owner starts them
        afresh, at the start positions — nothing of them was published (output goes out
        at completions), and no other task read what they emitted (the job's tasks exchange
        no records). No checkpoint in flight can complete without their snapshots, which
        nobody takes any more: aborted (nothing of the job completed yet, so nothing is
        lost but the wait), and until they are adopted no snapshot of them counts
        (``Carried.fresh``: a checkpoint completed with their silent owner's would be
        published, and then processed again by their adopter)."""
        self.carried.fresh.update(tasks)
        return self._abort_all(f"tasks {', '.join(sorted(tasks))} start afresh elsewhere", now)

    def _abort_all(self, reason: str, now: float) -> list[Command]:
        cmds: list[Command] = []
        for p in sorted(self.pending.values(), key=lambda p: p.checkpoint_id):
            cmds += self._abort(p, reason, now, counts=False)
        return cmds

    def _carry_silent(self, now: float) -> list[Command]:
        """Owners silent for ``CARRY_AFTER_S``: their tasks carried (the checkpoints in
        flight that only waited for them complete now), the hold scheduled; and the
        hold triggered when due."""
        latest = self.latest_completed
        if not self.isolated or self.phase is not JobPhase.RUNNING:
            return []
        if latest is None and not self.adopting:
            return []  # (no snapshot to carry, and no adopter to start them afresh)
        if self._unrestorable_latest():
            return []  # (their state is not at its snapshots: the ordinary failover)
        self._hold_if_due(now)
        stalled, self.carried.judged_at = now - self.carried.judged_at > STALL_S, now
        if stalled:
            return []  # (judged at the next tick, once what came meanwhile is read)
        owners = self.failover.by_member()
        silent = self._silent(set(owners) - set(self.carried.members), now)
        if not silent or not set(owners) - set(silent) - set(self.carried.members):
            return []  # nobody newly silent, or nobody left to go on
        cmds: list[Command] = []
        for member, heard in sorted(silent.items()):
            tasks = tuple(sorted(owners[member]))
            if latest is not None and any(t not in latest.tasks for t in tasks):
                continue  # (a task the latest checkpoint lacks: the ordinary failover)
            self.carried.members[member] = tasks
            if latest is None:  # (adopting: started afresh by their new owners)
                cmds += self._carry_fresh(tasks, now)
            else:
                self.carried.snapshots.update({t: latest.tasks[t] for t in tasks})
            for t in tasks:  # (an adopter silent in its turn: kept should it be heard again)
                if t in self.carried.adopted:
                    self.carried.adopting.setdefault(member, {})[t] = self.carried.adopted.pop(t)
                self.carried.running.discard(t)
            if self.adopting:  # (their new owners adopt them: kstream.protocol.adoption)
                then = "their new owners adopt them once the group moves them"
            else:
                assert latest is not None
                hold_at = heard + self.heartbeat_timeout - hold_lead(latest)
                self.carried.hold_at = min(self.carried.hold_at or hold_at, hold_at)
                then = f"a hand-over in {max(0.0, self.carried.hold_at - now):.1f}s, before the group's change"
            log.warning(
                "worker %s silent for %.1fs: its tasks %s are carried at %s (the others go on; %s)",
                member,
                now - heard,
                ", ".join(tasks),
                "the start positions" if latest is None else f"checkpoint {latest.checkpoint_id}",
                then,
            )
        for p in sorted(self.pending.values(), key=lambda p: p.checkpoint_id):
            self.carried.fill(p)
            if p.is_complete:
                cmds += self._complete(p, now)
        return cmds

    def _silent(self, members: set[str], now: float) -> dict[str, float]:
        """Those of ``members`` this coordinator heard from, silent for over
        ``CARRY_AFTER_S`` (``PULSED_CARRY_S`` since its last pulse, for one that pulses;
        its own outage counts as heard: ``Membership.cut_off``), with
        when they were last heard. A member never heard by this coordinator (it started
        a moment ago) is not judged here — unless it is expected to pulse (an owner of a
        cooperative job, from this coordinator's start on: ``Membership.expect``)."""
        out = {}
        pulses = self.members.pulses
        for m in members:
            seen = self.members.seen.get(m)
            if seen is None or (m not in self.members.beat and m not in pulses):
                continue
            pulsed = pulses.get(m)
            last = seen[0] if pulsed is None else max(seen[0], pulsed)
            if now - last > (CARRY_AFTER_S if pulsed is None else PULSED_CARRY_S):
                out[m] = last
        return out

    def _hold_if_due(self, now: float) -> None:
        hold_at = self.carried.hold_at
        if hold_at is None or now < hold_at:
            return
        self.carried.hold_at = None
        member = min(self.carried.members)
        if self.handover.want(member):
            log.info("hold checkpoint for the change that moves %s's tasks", member)
            self.triggers.request()

    def _carried_heard(self, member: str, now: float) -> list[Command]:
        """A carried member heartbeats again: it was stalled or frozen, not dead. Before
        the hold checkpoint its tasks are carried no more — the checkpoints since
        carried them, and it published nothing of them (the worker's rule), so its next
        acknowledgements count again and their completions publish what its tasks did
        meanwhile (those carried afresh: the checkpoints in flight, which ignored its
        snapshots of them, are aborted). Once the hold is triggered the change is made
        now: every task restores (a hand-over when the hold completed)."""
        tasks = self.carried.members.get(member)
        if tasks is None or member in self.members.stopped:
            return []  # (a stopped one's last heartbeat: it stays carried, §6.8)
        adopted = sorted(set(tasks) & self.carried.adopted.keys())
        if self.handover.blocks_triggers or adopted:
            return self._fail_over(
                f"worker {member} heard again after its tasks {', '.join(tasks)} were "
                "carried, "
                + (
                    f"and {', '.join(adopted)} adopted"
                    if adopted
                    else "with the hold checkpoint triggered"
                ),
                now,
            )
        del self.carried.members[member]
        owners = self.failover.owners
        adopting = self.carried.adopting.pop(member, {})
        fresh = self.carried.fresh & set(tasks)
        for task in tasks:
            if owners.get(task) != member:
                continue  # (one it released meanwhile: still carried)
            if task in adopting:  # (its adoption goes on: carried until its own snapshot)
                self.carried.adopted[task] = adopting[task]
            else:
                self.carried.snapshots.pop(task, None)
                self.carried.fresh.discard(task)
        if not self.carried.members:
            self.carried.hold_at = None
        log.warning(
            "worker %s heard again: its tasks %s are carried no more (it was silent, not "
            "dead; what they did meanwhile is published at the next completion)",
            member,
            ", ".join(tasks),
        )
        return self._abort_all(f"worker {member} heard again", now) if fresh else []
