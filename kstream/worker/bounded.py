"""Bounded mode (a batch job, one worker): read every source partition up to the end
offsets seen at start, end the inputs, store the final state once (no barrier),
publish the output with its commit marker and exit (docs/design.md §9)."""

from __future__ import annotations

import logging

from kstream.checkpointstorage.base import CheckpointStore
from kstream.kafka.dlq import DeadLetterWriter
from kstream.kafka.source import SourceConsumer
from kstream.worker.mode import TP, Mode
from kstream.worker.routing import Router
from kstream.worker.runner import final_manifests
from kstream.worker.settings import WorkerStats
from kstream.worker.tasks import WorkerTasks

log = logging.getLogger(__name__)


class Bounded(Mode):
    """A bounded task continues from its previous final state, if any."""

    def __init__(
        self,
        tasks: WorkerTasks,
        source: SourceConsumer,
        router: Router,
        dlq: DeadLetterWriter,
        store: CheckpointStore,
        app_id: str,
        stats: WorkerStats,
    ) -> None:
        self.tasks = tasks
        self.source = source
        self.router = router
        self.dlq = dlq
        self.store = store
        self.app_id = app_id
        self.stats = stats
        self.ends: dict[TP, int] = {}

    def begin(self, now: float) -> int | None:
        return None

    def stop(self, now: float) -> int | None:
        return 0

    def on_assignment(self, now: float) -> None:
        self.tasks.stop_all()
        for spec in self.tasks.assigned():
            finals = final_manifests(self.store, self.app_id, spec.task_id)
            runner = self.tasks.open(spec, 0, finals[max(finals)] if finals else None)
            self.tasks.seek_restored(runner)
            runner.running = True
        self.ends = self._end_offsets()

    def end(self, now: float) -> int | None:
        if not self.tasks.runners:
            return None
        self._end_inputs(now)
        if all(r.task.finished for r in self.tasks.runners.values()):
            return self._finish()
        return None

    def _end_offsets(self) -> dict[TP, int]:
        """End offsets of the user-topic partitions at start: a bounded run reads up to them.

        A partition that holds nothing (empty, or every record deleted) ends at once: 0.
        """
        ends = {}
        for tp in self.source.assignment:
            if tp[0] not in self.tasks.internal_parts:
                low, high = self.source.offset_range(tp)
                ends[tp] = high if high > low else 0
        return ends

    def _end_inputs(self, now: float) -> None:
        """End the input of each partition read up to its end offset and fed: the
        consumer's position passes the end (over transaction markers too) while the last
        records may still wait in the loop's backlog, which its task has not seen."""
        positions = self.source.positions(list(self.ends))
        unfed = self.unfed()
        for tp, end in list(self.ends.items()):
            if tp in unfed:
                continue
            pos = positions.get(tp)
            r = self.tasks.runners.get(self.tasks.task_of[tp])
            if r is None:
                continue
            seek = r.task.seek_positions().get(tp)
            if end == 0 or (pos is not None and pos >= end) or (seek is not None and seek >= end):
                r.step(r.task.end_input, tp[0], tp[1], now)
                del self.ends[tp]

    def _finish(self) -> int:
        """All tasks ended: wait for the final state uploads, then publish the sink output.

        The final state (with the exactly-once sink's buffer) is stored first, then the
        buffer is committed with its marker: a crash in between is repaired by the next
        bounded run, whose sink recovery commits the buffer if the marker is missing.
        """
        for r in self.tasks.runners.values():
            r.finished_uploads("", wait=True)  # no coordinator to acknowledge to
        for r in self.tasks.runners.values():
            if r.final_id is not None:
                for s in r.sinks.values():
                    s.on_checkpoint_completed(r.final_id)
        self.router.flush_internal()
        self.dlq.flush()
        log.info(
            "bounded run finished: %d records read, %d dead letters",
            self.stats.records,
            self.dlq.count,
        )
        return 0
