"""The worker's side of the metrics: what its loop calls, and when.

Hot path: :meth:`WorkerMetrics.records_in` and :meth:`records_out` once per batch
(a cached counter child, one addition). Everything else is read from plain
counters and state the worker keeps anyway, once per second (:meth:`sync`) or at
the event itself (a restore, a snapshot, a dead letter): no per-record work.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from prometheus_client import Counter

from kstream.elements.events import MIN_TS
from kstream.metrics.labels import dead_letter_reason
from kstream.metrics.registry import METRICS, Metrics


class TaskLike(Protocol):
    """What the metrics read from a runtime task."""

    watermark: int

    @property
    def metrics(self) -> Mapping[str, int]:
        """The task's own counters (``duplicates_dropped``, ...)."""
        ...

    def late_counts(self) -> dict[str, tuple[int, int]]: ...


class WorkerMetrics:
    """Updates one worker's metrics; ``metrics`` defaults to the process's."""

    def __init__(self, metrics: Metrics | None = None, wall: Any = time.time) -> None:
        self.m = metrics or METRICS
        self.wall = wall
        self._in: dict[tuple[str, str], Counter] = {}
        self._out: dict[tuple[str, str], Counter] = {}
        self._late_seen: dict[tuple[str, str], tuple[int, int]] = {}  # synced so far
        self._duplicates_seen: dict[str, int] = {}  # the same, of duplicates_dropped
        self._lag_tps: set[tuple[str, int]] = set()
        self._tasks: set[str] = set()

    # ---- per batch ---------------------------------------------------------------------

    def records_in(self, task: str, topic: str, n: int) -> None:
        child = self._in.get((task, topic))
        if child is None:
            child = self._in[(task, topic)] = self.m.records_in.labels(task, topic)
        child.inc(n)

    def records_out(self, task: str, topic: str, n: int) -> None:
        child = self._out.get((task, topic))
        if child is None:
            child = self._out[(task, topic)] = self.m.records_out.labels(task, topic)
        child.inc(n)

    # ---- events ------------------------------------------------------------------------

    def dead_letter(self, topic: str, reason: str) -> None:
        self.m.dead_letters.labels(topic, dead_letter_reason(reason)).inc()

    def restored(self, seconds: float, bytes_downloaded: int | None) -> None:
        """A task was restored from a checkpoint (``bytes_downloaded`` known) or started
        at the start positions (None)."""
        self.m.task_restores.labels("start" if bytes_downloaded is None else "checkpoint").inc()
        self.m.restore_duration.observe(seconds)
        if bytes_downloaded:
            self.m.restore_downloaded.inc(bytes_downloaded)

    def snapshot_acked(self, task: str, state_bytes: int) -> None:
        self.m.state_size.labels(task).set(state_bytes)

    def sink_buffer(self, task: str, epochs: int, blob_bytes: int) -> None:
        """An exactly-once sink's unpublished epochs and their size in its last snapshot."""
        self.m.sink_epochs_pending.labels(task).set(epochs)
        self.m.sink_pending_bytes.labels(task).set(blob_bytes if epochs else 0)

    # ---- once per second ---------------------------------------------------------------

    def sync(self, tasks: Mapping[str, TaskLike], lag: Mapping[tuple[str, int], int]) -> None:
        """Late-record and duplicate counters (as deltas), event-time lag, consumer lag,
        tasks running."""
        now_ms = self.wall() * 1000.0
        for task_id, task in tasks.items():
            self._sync_counts(task_id, task)
            if task.watermark > MIN_TS:  # the task has a watermark
                self.m.event_time_lag.labels(task_id).set((now_ms - task.watermark) / 1000.0)
        for gone in self._tasks - tasks.keys():
            self._forget(gone)
        self._tasks = set(tasks)
        self.m.tasks_running.set(len(tasks))
        for tp, n in lag.items():
            self.m.consumer_lag.labels(tp[0], str(tp[1])).set(n)
        for tp in self._lag_tps - lag.keys():  # no longer assigned here
            self.m.consumer_lag.remove(tp[0], str(tp[1]))
        self._lag_tps = set(lag)

    def task_closed(self, task_id: str, task: TaskLike) -> None:
        """A task stops here (restore, rebalance, failure): count its last late records;
        its next incarnation counts from zero again."""
        self._sync_counts(task_id, task)
        for key in [k for k in self._late_seen if k[0] == task_id]:
            del self._late_seen[key]
        self._duplicates_seen.pop(task_id, None)

    def _sync_counts(self, task_id: str, task: TaskLike) -> None:
        dups = task.metrics.get("duplicates_dropped", 0)
        seen = self._duplicates_seen.get(task_id, 0)
        if dups > seen:
            self.m.internal_duplicates.labels(task_id).inc(dups - seen)
            self._duplicates_seen[task_id] = dups
        for op, (dropped, side) in task.late_counts().items():
            seen_d, seen_s = self._late_seen.get((task_id, op), (0, 0))
            if dropped > seen_d:
                self.m.late_dropped.labels(task_id, op).inc(dropped - seen_d)
            if side > seen_s:
                self.m.late_side_output.labels(task_id, op).inc(side - seen_s)
            self._late_seen[(task_id, op)] = (dropped, side)

    def _forget(self, task_id: str) -> None:
        """Gauges of a task that no longer runs here are removed (another worker reports it)."""
        for gauge in (
            self.m.event_time_lag,
            self.m.state_size,
            self.m.sink_epochs_pending,
            self.m.sink_pending_bytes,
        ):
            with contextlib.suppress(KeyError):
                gauge.remove(task_id)


def sink_buffers(sinks: Iterable[Any]) -> tuple[int, bool]:
    """(sealed unpublished epochs, whether any sink is exactly-once) over a task's sinks."""
    epochs, exactly_once = 0, False
    for s in sinks:
        buffer = getattr(s, "buffer", None)
        if buffer is not None:
            exactly_once = True
            epochs += len(buffer.sealed)
    return epochs, exactly_once
