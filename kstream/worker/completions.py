"""Which announced completions a checkpointed worker acts on: those the checkpoint store
backs (docs/design.md §5.4), and of each, the tasks it carried at an older snapshot
(§6.7), whose output that completion does not publish."""

from __future__ import annotations

import logging

from kstream.checkpointstorage.base import CheckpointStore
from kstream.checkpointstorage.metadata import carried_tasks, completion_backing
from kstream.protocol.messages import CheckpointCompleted
from kstream.worker.settings import WorkerStats

log = logging.getLogger(__name__)

KEPT = 100  # completions remembered below the newest


class Completions:
    """The completions checked so far, for ``app_id`` under ``plan``."""

    def __init__(self, store: CheckpointStore, app_id: str, plan: str, stats: WorkerStats):
        self.store, self.app_id, self.plan, self.stats = store, app_id, plan, stats
        self._verified: set[int] = set()  # completed checkpoints the store backs
        # Of each, the tasks it carried at an older snapshot: not published by it.
        self._carried: dict[int, frozenset[str]] = {}

    def backed(self, msg: CheckpointCompleted) -> bool:
        """Whether the store backs completion ``msg`` (its metadata, of its attempt and our
        plan): anyone may write to the control topic, and acting on a forged completion
        would publish a sealed epoch early. What the store does not back is logged,
        counted and skipped."""
        n = msg.checkpoint_id
        if n in self._verified:
            return True
        backing = completion_backing(self.store, self.app_id, n, msg.attempt, self.plan)
        if not isinstance(backing, str):
            self._verified = {k for k in self._verified if k > n - KEPT} | {n}
            carried = carried_tasks(backing)
            self._carried = {k: v for k, v in self._carried.items() if k > n - KEPT}
            if carried:
                self._carried[n] = carried
            return True
        self.stats.unverified_control += 1
        log.warning("ignoring CheckpointCompleted(%d, attempt %d): %s", n, msg.attempt, backing)
        return False

    def carried(self, checkpoint_id: int) -> frozenset[str]:
        """The tasks completion ``checkpoint_id`` carried at an older snapshot."""
        return self._carried.get(checkpoint_id, frozenset())
