"""Checkpointing off: no coordinator. Tasks start with empty state where the group's
committed offsets are; sinks are at-least-once; offsets are committed about every
``commit_interval`` after the output is flushed (docs/design.md §9)."""

from __future__ import annotations

import logging

from kstream.kafka.dlq import DeadLetterWriter
from kstream.kafka.source import RawRecord, SourceConsumer
from kstream.worker.mode import TP, Mode
from kstream.worker.routing import Router
from kstream.worker.tasks import WorkerTasks

log = logging.getLogger(__name__)


class Unchecked(Mode):
    """At-least-once on committed group offsets."""

    def __init__(
        self,
        tasks: WorkerTasks,
        source: SourceConsumer,
        router: Router,
        dlq: DeadLetterWriter,
        *,
        now: float,
        commit_interval: float = 1.0,
        stop_when_idle: float | None = None,
    ) -> None:
        self.tasks = tasks
        self.source = source
        self.router = router
        self.dlq = dlq
        self.commit_interval = commit_interval
        self.stop_when_idle = stop_when_idle
        self.processed: dict[TP, int] = {}  # next offset to commit per partition
        self._next_commit = 0.0
        self._last_input = now
        self._drained = False  # everything read so far is flushed and committed

    def begin(self, now: float) -> int | None:
        return None

    def stop(self, now: float) -> int | None:
        self.commit()  # flushes the output first
        return 0

    def on_assignment(self, now: float) -> None:
        # Fresh tasks at the group's committed offsets (the earliest where none), so the
        # records fetched around the rebalance, which the loop drops, are read again.
        self.tasks.stop_all()
        for spec in self.tasks.assigned():
            runner = self.tasks.open(spec, 0, None)
            self.tasks.seek_committed(runner)
            runner.running = True

    def on_revoke(self, tps: list[TP]) -> None:
        # Last chance to commit what was processed before the partitions move on.
        self.commit(set(tps))
        for tp in tps:
            self.processed.pop(tp, None)

    def on_input(self, now: float) -> None:
        self._last_input, self._drained = now, False

    def on_fed(self, tp: TP, records: list[RawRecord]) -> None:
        self.processed[tp] = records[-1][3] + 1

    def end(self, now: float) -> int | None:
        if now >= self._next_commit:
            self.commit()
            self._next_commit = now + self.commit_interval
            self._drained = True
        idle = self.stop_when_idle is not None and now - self._last_input >= self.stop_when_idle
        if idle and self._drained:
            log.info(
                "no input for %.1fs and all output committed: stopping", now - self._last_input
            )
            return 0
        return None

    def commit(self, tps: set[TP] | None = None) -> None:
        """Flush every output, then commit what was processed (of ``tps``)."""
        if not self.tasks.runners:
            return
        for r in self.tasks.runners.values():
            r.flush_sinks()
        self.router.flush_internal()
        self.dlq.flush()
        self.source.commit({tp: o for tp, o in self.processed.items() if tps is None or tp in tps})
