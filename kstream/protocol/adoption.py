"""A crashed worker's tasks adopted by their new owners while every other task runs on
(docs/design.md §6.8; part of :class:`kstream.protocol.coordinator.CheckpointCoordinator`,
a base class of it). Pure, fed messages and a clock.

With cooperative assignment (``partition.assignment.strategy=cooperative-sticky``, only
for a job whose tasks exchange no records and read one topic), a rebalance moves only
the partitions that change owner. When a worker falls silent its tasks are carried
(:mod:`kstream.protocol.carrying`); once the group gives their partitions to others:

* **An adoption, not a restore.** The worker the group gave them asks (``AdoptRequest``,
  sent only while it runs its own tasks and lost none); the coordinator answers
  ``Adopt``: it restores them from the latest completed checkpoint — their carried
  snapshots — and runs them in the current attempt. No other task stops, and there is
  no hold checkpoint and no Resume: the others' output keeps its cadence.
* **One owner per task.** The adopter owns them from the ``Adopt`` on; acknowledgements
  of a task from any other member are ignored (a silent owner that wakes up is a zombie:
  the group removed it, so its publications are fenced by the group generation, and its
  snapshots must not stand for the task either). The checkpoints carry the adopted tasks
  at their carried snapshots until one completes with the adopter's own (which replaces
  the carried one in a checkpoint in flight): no checkpoint waits for the adopter.
* **What is not an adoption** — tasks that were not carried (a live owner lost them:
  a join), a member that is itself carried, another attempt — is restored as before.
* **The silent owner is lost** once all its tasks are adopted (forgotten, no restore);
  if the group does not move them within ``ADOPT_WAIT_S`` after its heartbeat timeout,
  the ordinary failover restores every task.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from kstream.checkpointstorage.metadata import CheckpointMetadata, TaskSnapshot
from kstream.protocol.carrying import CrashCarrying
from kstream.protocol.commands import Command, Send
from kstream.protocol.elasticmessages import RELEASED_BY, released_by
from kstream.protocol.failover import JobPhase
from kstream.protocol.messages import Adopt, AdoptRequest, Heartbeat, TasksReleased
from kstream.protocol.pending import PendingCheckpoint

log = logging.getLogger(__name__)

ADOPT_WAIT_S = 5.0
"""How long past its heartbeat timeout a carried member's tasks wait for the group to
give them to others (its session timeout should end first) before a failover."""


class TaskAdoption(CrashCarrying):
    """Adopting a silent worker's carried tasks (see the module)."""

    adopting: bool  # cooperative assignment in a job of isolated tasks

    @property
    def attempt(self) -> int:
        raise NotImplementedError

    @property
    def next_checkpoint_id(self) -> int:
        raise NotImplementedError

    def _on_adopt_request(self, msg: AdoptRequest, now: float) -> list[Command]:
        if msg.attempt != self.attempt or self.phase is not JobPhase.RUNNING:
            return []  # (a restore names every owner anyway)
        tasks = set(msg.tasks)
        latest = self.latest_completed
        owners = self.failover.owners
        if all(owners.get(t) == msg.member for t in tasks):
            return []  # (asked again before the Adopt reached it)
        cmds: list[Command] = []
        if self.adopting:
            cmds += self._carry_unheard(tasks, msg.member, latest, now)
        carry = self.carried
        orphans = (carry.snapshots.keys() | carry.fresh) - carry.adopted.keys()
        fresh = tasks <= carry.fresh  # (carried before any checkpoint completed)
        why = (
            "the job does not adopt tasks (cooperative assignment of tasks that exchange no "
            "records)"
            if not self.adopting
            else f"tasks {', '.join(sorted(tasks - orphans))} were not carried"
            if not tasks <= orphans
            else "some of them were carried at the start positions, some at a checkpoint"
            if not fresh and (tasks & carry.fresh or latest is None)
            else f"worker {msg.member} is carried itself"
            if msg.member in carry.members
            else ""
        )
        if why:
            return self._fail_over(
                f"worker {msg.member} was given tasks {', '.join(sorted(tasks))} in generation "
                f"{msg.generation}; no adoption: {why}",
                now,
            )
        owners = dict(self.failover.owners)
        for task in tasks:
            owners[task] = msg.member
            # Carried until a checkpoint completes with the adopter's own snapshot of
            # them (its acknowledgements replace the carried one): those in flight
            # carry them, not a late snapshot of their silent owner.
            carry.adopted[task] = msg.member
            carry.running.discard(task)
            if not fresh:
                for p in self.pending.values():
                    p.acks[task] = carry.snapshots[task]
        self.failover.owners = owners
        if fresh:  # (no snapshot of them comes for a checkpoint triggered before the Adopt)
            carry.fresh -= tasks
            cmds += self._abort_all(f"tasks {', '.join(sorted(tasks))} start afresh", now)
        fence = tuple(
            sorted(
                self.members.producers[m]
                for m, carried in self.carried.members.items()
                if tasks & set(carried) and m in self.members.producers
            )
        )
        for member, carried in list(self.carried.members.items()):
            if set(carried) <= self.carried.adopted.keys():
                del self.carried.members[member]
                self.carried.adopting.pop(member, None)
                self.members.seen.pop(member, None)  # lost: no failover for it
                if member.startswith(RELEASED_BY):
                    log.info("the tasks %s are all adopted", member)
                else:
                    log.info("worker %s lost: every task it ran is adopted", member)
        if not self.carried.members:
            self.carried.hold_at = None
        start = None if fresh or latest is None else latest.checkpoint_id
        log.warning(
            "worker %s adopts %s from %s (their owner left or fell silent); the other tasks run on",
            msg.member,
            ", ".join(sorted(tasks)),
            "the start positions" if start is None else f"checkpoint {start}",
        )
        adopt = Adopt(self.attempt, msg.member, start, tuple(sorted(tasks)), fence)
        cmds.append(Send(adopt))
        for p in sorted(self.pending.values(), key=lambda p: p.checkpoint_id):
            if p.is_complete:  # (it waited only for tasks carried just now)
                cmds += self._complete(p, now)
        return cmds

    def _on_release(self, msg: TasksReleased, now: float) -> list[Command]:
        """A live worker stopped the tasks whose partitions the group gave another member
        (a join): they are carried at their latest completed snapshots, owned by no
        worker (``released_by``), until their new owner asks to adopt them; if none does
        within the heartbeat timeout and ``ADOPT_WAIT_S``, the ordinary failover. The
        releaser's other tasks, and every other worker's, run on."""
        if msg.attempt == self.attempt and self.phase is JobPhase.RESTORING:
            # (released during the restore: the Resume waits for their new owner's ready)
            self.failover.unready(msg.member, msg.tasks, msg.generation)
            return []
        if msg.attempt != self.attempt or self.phase is not JobPhase.RUNNING:
            return []  # (a restore names every owner anyway)
        owners = self.failover.owners
        tasks = tuple(sorted(t for t in msg.tasks if owners.get(t) == msg.member))
        latest = self.latest_completed
        if not tasks:
            return []
        unrestorable = self._unrestorable_latest()
        if (
            not self.adopting
            or unrestorable
            or (latest is not None and any(t not in latest.tasks for t in tasks))
        ):
            why = (
                "the job does not adopt tasks"
                if not self.adopting
                else unrestorable or "the latest completed checkpoint lacks them"
            )
            return self._fail_over(
                f"worker {msg.member} released tasks {', '.join(tasks)}; no adoption: {why}", now
            )
        carried = self.carried.members.get(msg.member)
        if carried is not None:  # (it was carried, a false alarm: they are released now)
            rest = tuple(t for t in carried if t not in tasks)
            if rest:
                self.carried.members[msg.member] = rest
            else:
                del self.carried.members[msg.member]
        holder = released_by(msg.member)
        self.failover.owners = {**owners, **dict.fromkeys(tasks, holder)}
        held = tuple(sorted({*self.carried.members.get(holder, ()), *tasks}))
        self.carried.members[holder] = held
        for task in tasks:
            self.carried.adopted.pop(task, None)
            self.carried.running.discard(task)
        self.members.seen[holder] = (now, held)  # (lost if nobody adopts them in time)
        log.warning(
            "worker %s released %s (the group gave their partitions to another member): "
            "carried at %s until their new owner adopts them; the other tasks run on",
            msg.member,
            ", ".join(tasks),
            "the start positions" if latest is None else f"checkpoint {latest.checkpoint_id}",
        )
        if latest is None:
            return self._carry_fresh(tasks, now)
        self.carried.snapshots.update({t: latest.tasks[t] for t in tasks})
        cmds: list[Command] = []
        for p in sorted(self.pending.values(), key=lambda p: p.checkpoint_id):
            self.carried.fill(p)
            if p.is_complete:  # (it waited only for tasks carried just now)
                cmds += self._complete(p, now)
        return cmds

    def _carry_unheard(
        self, tasks: set[str], requester: str, latest: CheckpointMetadata | None, now: float
    ) -> list[Command]:
        """The owners of ``tasks`` this coordinator never heard from (it started after
        them: the dead worker hosted its predecessor), or that stopped (a graceful leave:
        its final checkpoint is the latest), are carried now — the group gave their
        partitions to another member, so they are out of it."""
        owners = self.failover.owners
        unheard = {
            o
            for t in tasks
            if (o := owners.get(t)) is not None
            and o != requester
            and (o not in self.members.beat or o in self.members.stopped)
        }
        return self._carry_now(unheard, latest, now)

    def _carry_stopped(self, member: str, now: float) -> list[Command]:
        """``member`` left gracefully (it drained: its final checkpoint is its tasks'
        latest snapshot): its tasks are carried at once, for their new owners to adopt."""
        if not self.adopting:
            return []
        cmds = self._carry_now({member}, self.latest_completed, now)
        for p in sorted(self.pending.values(), key=lambda p: p.checkpoint_id):
            if p.is_complete:  # (it waited only for tasks carried just now)
                cmds += self._complete(p, now)
        return cmds

    def _carry_now(
        self, members: set[str], latest: CheckpointMetadata | None, now: float
    ) -> list[Command]:
        cmds: list[Command] = []
        if self._unrestorable_latest():
            return cmds  # (not carried: a request to adopt their tasks restores them all)
        for member in sorted(members - set(self.carried.members)):
            owned = tuple(sorted(self.failover.by_member().get(member, ())))
            if not owned or (latest is not None and any(t not in latest.tasks for t in owned)):
                continue
            self.carried.members[member] = owned
            log.warning(
                "worker %s, %s: its tasks %s are carried at %s (their new owners adopt them)",
                member,
                "stopped" if member in self.members.stopped else "never heard by this coordinator",
                ", ".join(owned),
                "the start positions" if latest is None else f"checkpoint {latest.checkpoint_id}",
            )
            if latest is None:
                cmds += self._carry_fresh(owned, now)
            else:
                self.carried.snapshots.update({t: latest.tasks[t] for t in owned})
        for p in self.pending.values():
            self.carried.fill(p)
        return cmds

    def _owned_acks(
        self, p: PendingCheckpoint, member: str, snapshots: dict[str, TaskSnapshot]
    ) -> dict[str, TaskSnapshot]:
        """``member``'s snapshots of the tasks it owns (a zombie's of the tasks adopted
        from it are ignored); all of them from a message that names no member."""
        if not member:
            return snapshots
        owners = self.failover.owners
        fresh = self.carried.fresh  # (carried afresh, not adopted yet: no snapshot counts)
        mine = {
            t: s for t, s in snapshots.items() if owners.get(t, member) == member and t not in fresh
        }
        if len(mine) < len(snapshots):
            log.warning(
                "ignoring %d snapshot(s) of checkpoint %d from %s: tasks another worker owns",
                len(snapshots) - len(mine),
                p.checkpoint_id,
                member,
            )
        carried = self.carried
        for task in mine.keys() & carried.adopted.keys():  # (its own, not the carried one)
            old = carried.snapshots.get(task)  # (None: adopted afresh, nothing carried)
            if old is not None and p.acks.get(task) is old:
                del p.acks[task]
        return mine

    def _adopter_runs(self, attempt: int, member: str, tasks: Iterable[str]) -> None:
        """``member`` says it runs ``tasks`` (a heartbeat of its, sent once an adoption's
        restore is done, or an acknowledgement, late ones too): those it adopted are
        running there, and the checkpoints triggered from now on wait for its snapshots
        of them (``Carried.running``)."""
        if attempt != self.attempt or not member or not self.carried.adopted:
            return
        adopted = self.carried.adopted
        self.carried.running.update(t for t in tasks if adopted.get(t) == member)

    def _loss_grace(self) -> dict[str, float]:
        """Extra silence before a carried member is lost, while its tasks may be adopted."""
        if not self.adopting:
            return {}
        return {member: ADOPT_WAIT_S for member in self.carried.members}

    def _moved(self, hb: Heartbeat, previous: int, now: float) -> tuple[str, bool] | None:
        """Whether ``hb`` says tasks moved (``Membership.moved``), and why. Under
        cooperative assignment a new generation alone moved nothing: a worker's tasks
        moved only when it runs others than it owns (tasks it adopts and has not started
        yet aside; and carried tasks nobody adopted yet, which a worker that had not read
        the ``Resume`` restored: it asks to adopt them once it reads it); a heartbeat of
        an older generation is stale, ignored."""
        if not self.adopting:
            owners = self.failover.by_member()
            return self.members.moved(hb, previous, owners, self.attempt, now)
        if hb.generation < self.failover.generation:
            return None
        owned = self.failover.by_member().get(hb.member, frozenset())
        carry = self.carried
        starting = {t for t, m in carry.adopted.items() if m == hb.member}
        orphans = (carry.snapshots.keys() | carry.fresh) - carry.adopted.keys()
        if owned - starting <= set(hb.tasks) <= owned | orphans:
            return None
        return (
            f"worker {hb.member} runs tasks {sorted(hb.tasks)} but owns {sorted(owned)} in "
            f"attempt {self.attempt}",
            False,
        )
