"""Stream events: pipelined flags; idle source partitions."""

from __future__ import annotations

from kstream.api import Topology, WatermarkStrategy
from kstream.plan import plan_job
from kstream.runtime import Barrier, EndOfInput, Watermark
from tests.conftest import Kit


def test_only_barriers_require_pipelined_execution() -> None:
    assert Barrier(1, 0, 0).requires_pipelined
    assert not Watermark(5).requires_pipelined
    assert not EndOfInput().requires_pipelined


def test_idle_source_partition_does_not_stall_a_join(kit: type[Kit]) -> None:
    t = Topology("i")
    wm = WatermarkStrategy(0, idle_timeout_s=10.0)
    a = t.source("a", keyed=True, watermark=wm)
    b = t.source("b", keyed=True, watermark=wm)
    a.join(b, lambda x, y: [x, y], within_ms=0).to("out")
    task = kit.task(plan_job(t, "i", {"a": 1, "b": 1}))
    task.feed_source("a", 0, kit.records([("k", 1, 500)]), 1.0)
    task.feed_source("b", 0, kit.records([("k", 2, 500)]), 1.0)
    task.feed_source("a", 0, kit.records([("k", 1, 900)], 1), 8.0)
    assert task.watermark == 500
    task.tick(10.9)  # b silent since t=1.0 for 9.9 s: still active
    assert task.watermark == 500
    task.tick(11.0)
    assert task.watermark == 900
    task.feed_source("b", 0, kit.records([("k", 2, 950)], 1), 12.0)  # active again
    task.feed_source("a", 0, kit.records([("k", 1, 2000)], 2), 12.0)
    assert task.watermark == 950
