"""A task's watermark is the least of its input channels' — 1 024 of them per task
behind a repartition topic of 1 024 partitions. It was recomputed over every channel on
each watermark event: a worker's event set carries one per upstream task, so a set cost
P x P channel looks per task, 40 % of a worker reading at 1024 partitions
(benchmarks/SCALING.md). While the channel that held the watermark back still does,
nothing can move it, and no look is needed. Exact results, and the looks counted."""

from __future__ import annotations

import pytest

from kstream.api import Topology, Tumbling
from kstream.elements.events import Watermark
from kstream.elements.records import InternalEvent
from kstream.plan import plan_job
from kstream.runtime import gate as gate_module
from kstream.runtime.channels import Channel
from kstream.runtime.task import Task
from kstream.state.memory import MemoryBackend

P = 256


class _Looked(Channel):
    looks = 0

    def idle(self, now: float) -> bool:
        _Looked.looks += 1
        return super().idle(now)


@pytest.fixture
def task(monkeypatch: pytest.MonkeyPatch) -> tuple[Task, str, list[str]]:
    monkeypatch.setattr(gate_module, "Channel", _Looked)
    t = Topology("a")
    (
        t.source("in", keyed=True)
        .key_by(lambda v: v, key_serde="str")
        .window(Tumbling(1000))
        .count()
        .to("out")
    )
    plan = plan_job(t, "a", {"in": P})
    spec = next(s for s in plan.tasks if s.stage != plan.tasks[0].stage)
    (internal,) = {i.topic for i in spec.inputs}
    upstream = sorted(s.task_id for s in plan.tasks if s.stage == plan.tasks[0].stage)
    return Task(plan, spec.task_id, MemoryBackend()), internal, upstream


def _marks(upstream: list[str], ts: list[int], offset: int) -> list[InternalEvent]:
    """One watermark event per upstream task, at ``offset`` and after, in a partition."""
    return [
        InternalEvent(u, 0, offset + i, Watermark(t))
        for i, (u, t) in enumerate(zip(upstream, ts, strict=True))
    ]


def test_a_set_of_watermarks_behind_the_slowest_looks_at_each_channel_once(
    task: tuple[Task, str, list[str]],
) -> None:
    t, internal, upstream = task
    part = t.spec.inputs[0].partition
    _Looked.looks = 0
    # Every upstream task but the first moves to 5 000: the first still holds it at MIN.
    t.feed_internal(internal, part, _marks(upstream[1:], [5000] * (P - 1), 0), 1.0)
    assert t.watermark < 0
    assert _Looked.looks <= 2 * P  # was P x P
    # The slowest moves: the watermark is the least of all, exactly.
    t.feed_internal(internal, part, _marks(upstream[:1], [3000], P), 1.1)
    assert t.watermark == 3000
    t.feed_internal(internal, part, _marks(upstream[:1], [7000], P + 1), 1.2)
    assert t.watermark == 5000
    assert _Looked.looks <= 8 * P  # a look over all channels per move of the slowest
