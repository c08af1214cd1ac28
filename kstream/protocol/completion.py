"""A checkpoint's way from trigger to completion or abort, on the coordinator's side
(docs/design.md §5; part of :class:`kstream.protocol.coordinator.CheckpointCoordinator`,
a base class of it). Pure, fed messages and a clock.

* **Trigger** opens a :class:`~kstream.protocol.pending.PendingCheckpoint` that expects
  every task (carried tasks are filled in at once, :mod:`kstream.protocol.carrying`).
* **Acknowledgements** of the tasks a member owns are recorded; with the last one the
  metadata is written (``WriteMetadata``) — the checkpoint is announced complete only
  once the adapter confirms that write (``metadata_written``), which also subsumes the
  older checkpoints still in flight, makes a savepoint asked for and applies retention.
* **Abort**: a checkpoint that can no longer complete is announced aborted and its
  uploads cleaned up; a counted failure may fail the job (``tolerable_failures``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from kstream.checkpointstorage.history import CheckpointFailure
from kstream.checkpointstorage.metadata import CheckpointMetadata, TaskSnapshot
from kstream.config import CheckpointingConfig
from kstream.logs import ctx
from kstream.protocol.carrying import Carried
from kstream.protocol.commands import (
    ApplyRetention,
    CleanupCheckpoint,
    Command,
    CreateSavepoint,
    Finish,
    Send,
    WriteMetadata,
)
from kstream.protocol.completionlog import CompletionLog
from kstream.protocol.failover import FailoverController
from kstream.protocol.failures import CheckpointFailureManager
from kstream.protocol.handover import Handover
from kstream.protocol.messages import CheckpointAborted, CheckpointCompleted, TriggerCheckpoint
from kstream.protocol.pending import AckOutcome, PendingCheckpoint
from kstream.protocol.restorepoints import RestorePoints
from kstream.protocol.savepointrequests import SavepointRequests
from kstream.protocol.triggers import TriggerSchedule

log = logging.getLogger(__name__)


class CheckpointCompletion:
    """Triggering, counting acknowledgements, completing and aborting (see the module)."""

    expected: frozenset[str]
    config: CheckpointingConfig
    plan: str
    description: dict[str, Any] | None
    failover: FailoverController
    failures: CheckpointFailureManager
    pending: dict[int, PendingCheckpoint]
    latest_completed: CheckpointMetadata | None
    savepoints: SavepointRequests
    restore_points: RestorePoints
    ignored_messages: int
    triggers: TriggerSchedule
    ended: list[CheckpointFailure]
    handover: Handover
    carried: Carried
    _next_id: int
    _completing: dict[int, CheckpointMetadata]
    _completions: CompletionLog

    if TYPE_CHECKING:  # (defined by classes after this one in the MRO)

        @property
        def attempt(self) -> int: ...

        def _stop(self, reason: str, now: float) -> list[Command]: ...

        def _adopter_runs(self, attempt: int, member: str, tasks: Iterable[str]) -> None: ...

        def _owned_acks(
            self, p: PendingCheckpoint, member: str, snapshots: dict[str, TaskSnapshot]
        ) -> dict[str, TaskSnapshot]: ...

    def metadata_written(self, checkpoint_id: int, now: float) -> list[Command]:
        """The metadata of ``checkpoint_id`` is in the store: announce it, then apply retention."""
        meta = self._completing.pop(checkpoint_id)
        self.latest_completed = meta
        self.carried.refresh(meta, self.pending.values())
        self.restore_points.completed(meta, self.config.retained)
        self.triggers.finished(now)
        self.handover.completed(checkpoint_id, now)
        self.failures.record_success(checkpoint_id)
        self._completions.log(meta, now)
        cmds: list[Command] = [Send(CheckpointCompleted(checkpoint_id, meta.attempt))]
        # A completed checkpoint subsumes older ones still in flight (not failures).
        for p in [p for n, p in self.pending.items() if n < checkpoint_id]:
            cmds += self._abort(p, f"subsumed by checkpoint {checkpoint_id}", now, counts=False)
        sp = self.savepoints.due(checkpoint_id)
        if sp is not None:
            # The savepoint's manifests are copied before retention may delete them.
            cmds.append(CreateSavepoint(sp.name, meta))
        cmds.append(ApplyRetention(self.config.retained))
        if sp is not None and sp.stop:
            reason = f"stopped with savepoint {sp.name} (checkpoint {checkpoint_id})"
            cmds += [*self._stop(reason, now), Finish(reason)]
        return cmds

    def metadata_failed(self, checkpoint_id: int, error: str, now: float) -> list[Command]:
        """Writing the metadata of ``checkpoint_id`` failed: the checkpoint failed."""
        meta = self._completing.pop(checkpoint_id)
        p = PendingCheckpoint(checkpoint_id, meta.attempt, meta.trigger_time, self.expected)
        p.acks = dict(meta.tasks)
        reason = f"checkpoint {checkpoint_id}: writing its metadata failed: {error}"
        return self._abort(p, reason, now, counts=True)

    def _trigger(self, now: float) -> Send:
        n, self._next_id = self._next_id, self._next_id + 1
        self.pending[n] = PendingCheckpoint(n, self.attempt, now, self.expected)
        self.carried.fill(self.pending[n])
        self.triggers.triggered(now)
        hold = self.handover.take(n)
        if hold:
            log.info("checkpoint %d holds every task: a hand-over", n, extra=ctx(checkpoint=n))
        return Send(TriggerCheckpoint(n, self.attempt, int(now * 1000), hold))

    def _pending_for(self, checkpoint_id: int, attempt: int) -> PendingCheckpoint | None:
        p = self.pending.get(checkpoint_id)
        if p is None or p.attempt != attempt:
            self.ignored_messages += 1
            log.debug("ignoring message for checkpoint %d attempt %d", checkpoint_id, attempt)
            return None
        return p

    def _on_acks(
        self, n: int, attempt: int, snapshots: dict[str, TaskSnapshot], now: float, member: str = ""
    ) -> list[Command]:
        """Tasks' acknowledgements of checkpoint ``n`` (one message: a task's, or a
        worker's ``member``'s for all its tasks: only those it owns count)."""
        self._adopter_runs(attempt, member, snapshots)
        p = self._pending_for(n, attempt)
        if p is None:
            return []
        snapshots = self._owned_acks(p, member, snapshots)
        for task_id, outcome in p.acknowledge(snapshots, now):
            self.ignored_messages += 1
            if outcome is AckOutcome.UNEXPECTED_TASK:
                log.warning("ack from task %r which is not in the plan; ignored", task_id)
        return self._complete(p, now) if p.is_complete else []

    def _complete(self, p: PendingCheckpoint, now: float) -> list[Command]:
        # Every task acknowledged: the metadata is written first; the announcement
        # follows only once the adapter confirms the write (metadata_written).
        del self.pending[p.checkpoint_id]
        meta = replace(p.to_metadata(now), description=self.description, plan=self.plan or None)
        self._completing[p.checkpoint_id] = meta
        return [WriteMetadata(meta)]

    def _abort(
        self, p: PendingCheckpoint, reason: str, now: float, *, counts: bool
    ) -> list[Command]:
        self.pending.pop(p.checkpoint_id, None)
        self.triggers.finished(now)
        self.handover.aborted(p.checkpoint_id)
        self.ended.append(p.ended(reason, now, failed=counts))
        cmds: list[Command] = [
            Send(CheckpointAborted(p.checkpoint_id, reason)),
            CleanupCheckpoint(p.checkpoint_id, p.handles()),
        ]
        if counts and self.failures.record_failure(p.checkpoint_id):
            k = self.failures.successive_failures
            verdict = (
                f"{reason}. {k} successive checkpoints failed; "
                f"tolerable_failures={self.config.tolerable_failures} -> job failed"
            )
            for other in list(self.pending.values()):
                cmds += self._abort(other, "job failed", now, counts=False)
            cmds += self.failover.fail(verdict)
        return cmds
