"""Shared helpers for the fast runtime tests (no broker): encode inputs, decode
outputs, build single-task window jobs."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from kstream.api import Topology, WatermarkStrategy, WindowSpec
from kstream.plan import JobPlan, plan_job
from kstream.runtime import Output, OutputBatch, OutputEvent, SnapshotPoint, SourceRecord, Task
from kstream.state.memory import MemoryBackend


class Kit:
    """Static helpers; the ``kit`` fixture hands this class to tests."""

    @staticmethod
    def records(rows: Sequence[tuple[Any, Any, int]], first_offset: int = 0) -> list[SourceRecord]:
        """``(key, json value, ts)`` rows as raw source records with offsets."""
        return [
            (
                None if k is None else str(k).encode(),
                None if v is None else json.dumps(v).encode(),
                ts,
                first_offset + i,
            )
            for i, (k, v, ts) in enumerate(rows)
        ]

    @staticmethod
    def sink(outputs: Sequence[Output], topic: str) -> list[tuple[Any, Any, int]]:
        """Decoded ``(str key, json value, ts)`` records written to sink ``topic``."""
        rows = []
        for o in outputs:
            if isinstance(o, OutputBatch) and o.topic == topic:
                for k, v, t in zip(o.keys, o.values, o.timestamps, strict=True):
                    rows.append(
                        (
                            None if k is None else k.decode(),
                            None if v is None else json.loads(v),
                            t,
                        )
                    )
        return rows

    @staticmethod
    def trace(outputs: Sequence[Output]) -> list[str]:
        """A compact description of the output order."""
        out = []
        for o in outputs:
            if isinstance(o, OutputBatch):
                out.append(f"data:{o.topic}:{len(o.keys)}")
            elif isinstance(o, OutputEvent):
                out.append(f"event:{o.topic}:{type(o.event).__name__}")
            elif isinstance(o, SnapshotPoint):
                out.append(f"snapshot:{o.checkpoint_id}")
            else:
                out.append(type(o).__name__)
        return out

    @staticmethod
    def window_job(
        spec: WindowSpec,
        *,
        allowed_lateness_ms: int = 0,
        out_of_orderness_ms: int = 0,
        late_output: bool = False,
        agg: str = "count",
        emit: str = "final",
    ) -> JobPlan:
        """One keyed source ``events`` -> window -> ``out`` as ``[key, start, end, value]``
        (plus late records to ``late``)."""
        t = Topology("w")
        s = t.source(
            "events",
            keyed=True,
            watermark=WatermarkStrategy(max_out_of_orderness_ms=out_of_orderness_ms),
        )
        w = s.window(spec, allowed_lateness_ms=allowed_lateness_ms, emit=emit)
        if late_output:
            w.late().to("late")
        if agg == "count":
            res = w.count()
        elif agg == "sum":
            res = w.aggregate(lambda: 0, lambda a, v: a + v, lambda a, b: a + b)
        else:
            res = w.reduce(lambda a, v: max(a, v))
        res.map(lambda r: [r.key, r.start, r.end, r.value]).to("out")
        return plan_job(t, "w", {"events": 1})

    @staticmethod
    def task(
        plan: JobPlan,
        task_id: str = "stage0-0",
        *,
        on_snapshot: Callable[[SnapshotPoint], None] | None = None,
        **kw: Any,
    ) -> DrivenTask:
        """The task, driven as the worker's runner drives it (see ``DrivenTask``)."""
        task = Task(plan, task_id, kw.pop("backend", None) or MemoryBackend(), **kw)
        return DrivenTask(task, on_snapshot)


class DrivenTask:
    """A task driven as :class:`kstream.worker.runner.TaskRunner` drives it: after every
    call its outputs are collected; at each ``SnapshotPoint`` the snapshot is taken
    (``on_snapshot`` sees the state exactly at the point) and the task continues.
    ``drain()`` returns everything collected since the last drain, points included."""

    def __init__(self, task: Task, on_snapshot: Callable[[SnapshotPoint], None] | None) -> None:
        self.task = task
        self.on_snapshot = on_snapshot
        self._out: list[Output] = []

    def _collect(self) -> None:
        while True:
            out = self.task.drain()
            self._out.extend(out)
            points = [o for o in out if isinstance(o, SnapshotPoint)]
            if not points:
                return
            assert len(points) == 1 and not self.task.drain()  # the task holds at a point
            if self.on_snapshot is not None:
                self.on_snapshot(points[0])
            self.task.snapshot_taken()

    def feed_source(self, topic: str, partition: int, records: Any, now: float) -> None:
        self.task.feed_source(topic, partition, records, now)
        self._collect()

    def feed_internal(self, topic: str, partition: int, items: Any, now: float) -> None:
        self.task.feed_internal(topic, partition, items, now)
        self._collect()

    def end_input(self, topic: str, partition: int, now: float) -> None:
        self.task.end_input(topic, partition, now)
        self._collect()

    def trigger_checkpoint(self, checkpoint_id: int, attempt: int, now: float) -> None:
        self.task.trigger_checkpoint(checkpoint_id, attempt, now)
        self._collect()

    def tick(self, now: float, wall_ms: int | None = None) -> None:
        self.task.tick(now, wall_ms)
        self._collect()

    def drain(self) -> list[Output]:
        out, self._out = self._out, []
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.task, name)


@pytest.fixture
def kit() -> type[Kit]:
    return Kit
