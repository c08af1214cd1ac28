"""Late records are counted per operator (``Task.late_counts``) and summarised for the
log."""

from __future__ import annotations

from typing import Any

from kstream.api import Topology, Tumbling, WatermarkStrategy
from kstream.plan import plan_job
from kstream.runtime.lateness import late_summary


def test_each_window_and_join_counts_its_own_late_records(kit: Any) -> None:
    t = Topology("late")
    clicks = t.source("clicks", keyed=True, watermark=WatermarkStrategy(0))
    views = t.source("views", keyed=True, watermark=WatermarkStrategy(0))
    w = clicks.window(Tumbling(100), name="per-100ms")
    w.late().to("too-late")
    w.count().to("counts")
    clicks.join(views, lambda a, b: [a, b], within_ms=10, name="click-view").to("pairs")
    task = kit.task(plan_job(t, "late", {"clicks": 1, "views": 1}))
    task.feed_source("views", 0, kit.records([("k", 1, 1000)]), 0.0)
    # 500 is behind the clicks partition's watermark (1000) just before it.
    task.feed_source("clicks", 0, kit.records([("k", 1, 1000), ("k", 1, 500)]), 0.0)
    counts = task.late_counts()
    assert counts == {
        "per-100ms": (0, 1),
        "click-view": (1, 0),
    }
    assert task.metrics["late_dropped"] == 1 and task.metrics["late_side_output"] == 1
    assert late_summary([("stage0-0", counts)]) == (
        "stage0-0 click-view: 1 late (1 dropped, 0 to the late output)\n"
        "stage0-0 per-100ms: 1 late (0 dropped, 1 to the late output)"
    )
    assert late_summary([("stage0-0", {"w": (0, 0)})]) is None
