"""Shared helpers for the fast runtime tests (no broker): encode inputs, decode
outputs, build single-task window jobs."""

from __future__ import annotations

import json
from collections.abc import Sequence
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
    ) -> JobPlan:
        """One keyed source ``events`` -> window -> ``out`` as ``[key, start, end, value]``
        (plus late records to ``late``)."""
        t = Topology("w")
        s = t.source(
            "events",
            keyed=True,
            watermark=WatermarkStrategy(max_out_of_orderness_ms=out_of_orderness_ms),
        )
        w = s.window(spec, allowed_lateness_ms=allowed_lateness_ms)
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
    def task(plan: JobPlan, task_id: str = "stage0-0", **kw: Any) -> Task:
        return Task(plan, task_id, kw.pop("backend", None) or MemoryBackend(), **kw)


@pytest.fixture
def kit() -> type[Kit]:
    return Kit
