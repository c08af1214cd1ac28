"""Watermark alignment decisions (pure), and the watermarks a task reports for it."""

from __future__ import annotations

from typing import Any

from kstream.api import Topology, Tumbling, WatermarkStrategy
from kstream.elements.events import MIN_TS
from kstream.plan import plan_job
from kstream.runtime.watermark_alignment import PartitionTime, WatermarkAligner

A, B, C = ("in", 0), ("in", 1), ("in", 2)


def test_a_partition_more_than_the_drift_ahead_of_the_slowest_is_paused() -> None:
    aligner = WatermarkAligner({"in": 1000})
    parts = {
        A: PartitionTime(5000, True),
        B: PartitionTime(6000, True),
        C: PartitionTime(6001, True),
    }
    assert aligner.paused(parts) == {C}  # 6001 - 5000 > 1000; 6000 - 5000 is not
    # The slowest catches up: everything runs again.
    parts[A] = PartitionTime(5500, True)
    assert aligner.paused(parts) == set()


def test_quiet_and_ended_partitions_hold_no_one_back() -> None:
    aligner = WatermarkAligner({"in": 1000})
    quiet = {
        A: PartitionTime(100, False),
        B: PartitionTime(9000, True),
        C: PartitionTime(9500, True),
    }
    assert aligner.paused(quiet) == set()  # A has nothing to read: silent, not slow
    ended = {A: PartitionTime(100, True, ended=True), B: PartitionTime(9000, True)}
    assert aligner.paused(ended) == set()


def test_a_partition_that_read_nothing_yet_holds_the_others_back() -> None:
    aligner = WatermarkAligner({"in": 1000})
    parts = {
        A: PartitionTime(MIN_TS, True),
        B: PartitionTime(10, True),
        C: PartitionTime(MIN_TS, True),
    }
    assert aligner.paused(parts) == {B}


def test_sources_are_aligned_separately_and_only_when_asked() -> None:
    aligner = WatermarkAligner({"in": 1000})
    parts = {
        A: PartitionTime(0, True),
        ("in", 1): PartitionTime(5000, True),
        ("other", 0): PartitionTime(0, True),
        ("other", 1): PartitionTime(50_000, True),
    }
    assert aligner.paused(parts) == {("in", 1)}


def test_a_task_reports_its_source_watermarks_not_its_tables(kit: Any) -> None:
    t = Topology("a")
    s = t.source("in", keyed=True, watermark=WatermarkStrategy(100, max_drift_ms=5000))
    table = t.table("dim", key_serde="str")
    s.join_table(table, lambda a, b: a).window(Tumbling(10)).count().to("out")
    task = kit.task(plan_job(t, "a", {"in": 2, "dim": 2}))
    assert task.source_watermarks() == {("in", 0): (MIN_TS, False)}
    task.feed_source("in", 0, kit.records([("k", 1, 1000), ("k", 1, 700)]), 0.0)
    assert task.source_watermarks() == {("in", 0): (900, False)}
