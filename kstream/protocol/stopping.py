"""How a job stops and starts again, as the coordinator decides it (part of
:class:`kstream.protocol.coordinator.CheckpointCoordinator`, a base class of it).

* **On request, with a savepoint** (``kstream savepoint [--stop]``): the savepoint is
  the first checkpoint triggered after the request; with ``--stop`` a ``StopJob``
  precedes that trigger on the control topic, so the workers stop reading input first
  and the savepoint covers everything they read. A request while the job restores
  waits for it to run again (:mod:`kstream.protocol.savepointrequests`).
* **By its workers**: once every owner of the running attempt stopped gracefully
  (``--stop-when-idle``, SIGTERM to all), the job is stopped: ``JobStopped`` says when
  and why, checkpoints in flight are aborted and nothing is triggered any more.
* **Out of a restore**: a worker told to stop while the job restores asks to leave
  (``CheckpointRequest(LEAVING)``). Read while still restoring, its readies are
  forgotten and ignored from then on, and it is told to leave now (``HandoverDeclined``):
  the Resume waits for the group's change. Read after the Resume (the worker had not
  read it yet), the request is a running worker's: a hand-over checkpoint.
* **Hand-overs asked for** by a worker leaving or joining a running job: a hold
  checkpoint, unless declined (:mod:`kstream.protocol.handover`).
* **Again**: a worker that did not stop heartbeating to a stopped job starts it again,
  every task restored from the latest checkpoint, as at a first start; and a job that
  restored resumes (``_resumed``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kstream.logs import ctx
from kstream.protocol.carrying import Carried
from kstream.protocol.causes import stopped_reason
from kstream.protocol.commands import Command, Send
from kstream.protocol.failover import FailoverController, JobPhase
from kstream.protocol.handover import HEARD_WITHIN_S, JOINING, LEAVING, Handover
from kstream.protocol.membership import Membership
from kstream.protocol.messages import (
    CheckpointRequest,
    HandoverDeclined,
    Heartbeat,
    JobStopped,
    SavepointRequest,
    StopJob,
    WorkerStopped,
)
from kstream.protocol.savepointrequests import SavepointRequests
from kstream.protocol.triggers import TriggerSchedule

if TYPE_CHECKING:
    from kstream.protocol.pending import PendingCheckpoint

log = logging.getLogger(__name__)


class JobStopping:
    """Stopping and starting again (see the module)."""

    pending: dict[int, PendingCheckpoint]
    failover: FailoverController
    triggers: TriggerSchedule
    members: Membership
    savepoints: SavepointRequests
    handover: Handover
    carried: Carried
    adopting: bool
    _next_id: int
    _started: float

    @property
    def phase(self) -> JobPhase:
        raise NotImplementedError

    @property
    def attempt(self) -> int:
        raise NotImplementedError

    if TYPE_CHECKING:  # (kstream.protocol.adoption's, after this class in the MRO)

        def _carry_stopped(self, member: str, now: float) -> list[Command]: ...

    def _abort(
        self, p: PendingCheckpoint, reason: str, now: float, *, counts: bool
    ) -> list[Command]:
        raise NotImplementedError

    def _stop(self, reason: str, now: float) -> list[Command]:
        """The job stopped: ``JobStopped`` says when and why; checkpoints still in flight
        can never complete (aborted) and nothing is triggered any more."""
        cmds: list[Command] = []
        for p in list(self.pending.values()):
            cmds += self._abort(p, f"job stopped: {reason}", now, counts=False)
        self.failover.stopped()
        self.triggers.drop_request()
        self.handover.clear()  # a start again is not the change a hold prepared
        self.carried.clear()
        log.info("job stopped in attempt %d: %s", self.attempt, reason)
        return [*cmds, Send(JobStopped(self.attempt, reason))]

    def _on_worker_stopped(self, msg: WorkerStopped, now: float) -> list[Command]:
        """A worker exited gracefully: it is not lost; once every owner of the running
        attempt stopped (``--stop-when-idle``, SIGTERM to all), the job is stopped. One
        that stopped during a restore is no longer counted ready for it."""
        self.members.stop(msg.member, msg.reason)
        if self.phase is JobPhase.RESTORING:
            # It left during the restore (nothing ran since the restored checkpoint):
            # its readies die with it, so the Resume names only live owners.
            self.failover.forget_readies(msg.member)
            return self._none_left(f"the restore of attempt {self.attempt}", now)
        owners = set(self.failover.by_member())
        if self.phase is not JobPhase.RUNNING or msg.attempt != self.attempt or not owners:
            return []
        if not self.members.all_stopped(owners):
            # The group rebalances; the others take its tasks over (adopt them, with
            # cooperative assignment: carried at its final checkpoint until then).
            return self._carry_stopped(msg.member, now)
        return self._stop(stopped_reason({m: self.members.stopped[m] for m in owners}), now)

    def _request_in_restore(self, msg: CheckpointRequest, now: float) -> list[Command]:
        """A hand-over asked for while the job restores (nothing runs until the Resume):
        a joiner may join now when joins are welcome (the Resume waits for it); a
        leaver of this restore leaves now, its readies forgotten (see the module)."""
        if msg.reason == JOINING and self.handover.joins_welcome:
            self.failover.expect_joiner(msg.member, now)
            why = f"joining during the restore of attempt {self.attempt}: the Resume waits"
            return [Send(HandoverDeclined(msg.member, why))]
        if msg.reason == LEAVING and msg.attempt == self.attempt:
            # Its readies are forgotten, and any it sends later (a rebalance before it
            # read the answer) are ignored as a stopped member's: no Resume names it, and
            # its last heartbeats start no stopped job.
            self.failover.forget_readies(msg.member)
            leaving = f"leaving during the restore of attempt {self.attempt}"
            self.members.stop(msg.member, leaving)
            log.info("worker %s leaves during the restore of attempt %d", msg.member, msg.attempt)
            answer: list[Command] = [
                Send(HandoverDeclined(msg.member, f"{leaving}: the Resume waits"))
            ]
            return answer + self._none_left(f"the restore of attempt {self.attempt}", now)
        return []

    def _hand_over(self, member: str, why: str, now: float) -> list[Command]:
        """``member`` asked for a hand-over (``Handover.request`` decides). A leaver whose
        tasks will be adopted (cooperative assignment, kstream.protocol.adoption) needs
        no hold of the others: a plain checkpoint now, its final one once it drained."""
        if self.adopting and why == LEAVING:
            self.triggers.request()
            return []
        quiet = self.members.quiet(set(self.failover.by_member()), HEARD_WITHIN_S, now)
        trigger, declined = self.handover.request(member, why, quiet, now - self._started)
        if trigger:
            self.triggers.request()
        if declined is None:
            return []
        log.info("hand-over for %s declined: %s", member, declined)
        return [Send(HandoverDeclined(member, declined))]

    def _none_left(self, during: str, now: float) -> list[Command]:
        """Every worker heard from stopped or leaves during a restore (SIGTERM to all: a
        deployment deleted mid-restore): the job is stopped, so `kstream status` says so
        rather than "restoring" for good (a worker heard from later starts it again). A
        coordinator up for less than HEARD_WITHIN_S may not have heard the others yet."""
        if self.members.live() or now - self._started < HEARD_WITHIN_S:
            return []
        return self._stop(f"every worker stopped during {during}", now)

    def _restart_stopped(self, hb: Heartbeat, now: float) -> list[Command]:
        """A stopped job starts again when a worker that did not stop heartbeats (one
        joined; any generation: an emptied group may start over at 1): every task is
        restored from the latest checkpoint, as at a first start."""
        if not self.members.joined(hb.member, hb.tasks, now):
            return []  # a heartbeat it sent before it stopped
        log.info("worker %s joined the stopped job: starting it again", hb.member)
        return self.failover.start_again(hb.generation, now)

    def _on_savepoint_request(self, msg: SavepointRequest) -> list[Command]:
        """Savepoint ``msg.name`` of the next checkpoint; with ``stop`` the workers stop
        reading input first (``StopJob`` precedes that checkpoint's trigger on the control
        topic, so it covers everything they read) and the coordinator finishes after it."""
        if not self.savepoints.request(msg, str(self.phase), self._next_id - 1, self.attempt):
            return []  # refused, or made once the restore ended
        return self._savepoint_started(msg)

    def _resumed(self, resume: list[Command], now: float) -> list[Command]:
        """``resume``: the Resume the failover wrote, if any. The job runs again: the
        interval counts from now, no hold is left, and a savepoint asked for during the
        restore, or started in an earlier attempt, starts now."""
        if not resume:
            return []
        log.info(
            "all tasks ready: resuming attempt %d", self.attempt, extra=ctx(attempt=self.attempt)
        )
        self.triggers.interval_from(now)
        self.handover.clear()
        waited = self.savepoints.resumed(self._next_id - 1, self.attempt)
        return resume + ([] if waited is None else self._savepoint_started(waited))

    def _savepoint_started(self, msg: SavepointRequest) -> list[Command]:
        self.triggers.request()
        if msg.stop:
            reason = f"stop with savepoint {msg.name}"
            return [Send(StopJob(self.attempt, reason, after=self._next_id - 1))]
        return []
