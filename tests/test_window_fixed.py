"""Tumbling and hopping windows: exact outputs for in-order, out-of-order and late data."""

from __future__ import annotations

from pathlib import Path

import pytest

from kstream.api import Hopping, Tumbling
from kstream.operators.windows import FIRE_BATCH
from kstream.runtime import OutputBatch
from kstream.state.memory import MemoryBackend
from kstream.state.rocksdb import RocksDBBackend
from tests.conftest import Kit


def test_tumbling_in_order_fires_on_watermark(kit: type[Kit]) -> None:
    task = kit.task(kit.window_job(Tumbling(1000)))
    task.feed_source("events", 0, kit.records([("a", 1, 100), ("b", 1, 200), ("a", 1, 900)]), 0.0)
    assert kit.sink(task.drain(), "out") == []  # watermark 900 < end 1000
    task.feed_source("events", 0, kit.records([("a", 1, 1000), ("b", 1, 2500)], 3), 0.0)
    assert kit.sink(task.drain(), "out") == [
        ("a", ["a", 0, 1000, 2], 999),
        ("b", ["b", 0, 1000, 1], 999),
        ("a", ["a", 1000, 2000, 1], 1999),
    ]
    task.end_input("events", 0, 0.0)
    assert kit.sink(task.drain(), "out") == [("b", ["b", 2000, 3000, 1], 2999)]


def test_tumbling_out_of_order_within_bound_is_counted(kit: type[Kit]) -> None:
    task = kit.task(kit.window_job(Tumbling(1000), out_of_orderness_ms=500))
    task.feed_source("events", 0, kit.records([("a", 1, 1200)]), 0.0)  # wm 700
    task.feed_source("events", 0, kit.records([("a", 1, 800), ("a", 1, 1400)], 1), 0.0)  # wm 900
    assert kit.sink(task.drain(), "out") == []
    task.feed_source("events", 0, kit.records([("a", 1, 1600)], 3), 0.0)  # wm 1100
    assert kit.sink(task.drain(), "out") == [("a", ["a", 0, 1000, 1], 999)]
    task.end_input("events", 0, 0.0)
    assert kit.sink(task.drain(), "out") == [("a", ["a", 1000, 2000, 3], 1999)]


def test_late_record_is_dropped_and_counted(kit: type[Kit]) -> None:
    task = kit.task(kit.window_job(Tumbling(1000)))
    task.feed_source("events", 0, kit.records([("a", 1, 100), ("a", 1, 1500)]), 0.0)
    task.feed_source("events", 0, kit.records([("a", 1, 300), ("a", 1, 1600)], 2), 0.0)
    out = task.drain()
    assert kit.sink(out, "out") == [("a", ["a", 0, 1000, 1], 999)]
    assert task.metrics["late_dropped"] == 1
    (op,) = task.late_counts()  # counted per operator too (the late-records metric)
    assert op == "stage0.window0" and task.late_counts()[op] == (1, 0)
    task.end_input("events", 0, 0.0)
    assert kit.sink(task.drain(), "out") == [("a", ["a", 1000, 2000, 2], 1999)]


def test_late_record_goes_to_side_output(kit: type[Kit]) -> None:
    task = kit.task(kit.window_job(Tumbling(1000), late_output=True))
    task.feed_source("events", 0, kit.records([("a", 1, 100), ("a", 1, 1500)]), 0.0)
    task.feed_source("events", 0, kit.records([("a", 7, 300)], 2), 0.0)
    assert kit.sink(task.drain(), "late") == [("a", 7, 300)]
    assert task.metrics["late_side_output"] == 1
    assert task.metrics["late_dropped"] == 0
    assert list(task.late_counts().values()) == [(0, 1)]


def test_allowed_lateness_refires_then_drops(kit: type[Kit]) -> None:
    task = kit.task(kit.window_job(Tumbling(1000), allowed_lateness_ms=500))
    task.feed_source("events", 0, kit.records([("a", 1, 100), ("a", 1, 1200)]), 0.0)
    assert kit.sink(task.drain(), "out") == [("a", ["a", 0, 1000, 1], 999)]
    # Behind the watermark but within the allowed lateness: the window fires again.
    task.feed_source("events", 0, kit.records([("a", 1, 400)], 2), 0.0)
    assert kit.sink(task.drain(), "out") == [("a", ["a", 0, 1000, 2], 999)]
    task.feed_source("events", 0, kit.records([("a", 1, 1500)], 3), 0.0)  # wm 1500: expired
    task.feed_source("events", 0, kit.records([("a", 1, 500)], 4), 0.0)
    assert kit.sink(task.drain(), "out") == []
    assert task.metrics["late_dropped"] == 1


def test_hopping_assigns_every_overlapping_window(kit: type[Kit]) -> None:
    task = kit.task(kit.window_job(Hopping(1000, 500), agg="sum"))
    task.feed_source(
        "events", 0, kit.records([("a", 1, 100), ("a", 10, 600), ("a", 100, 1100)]), 0.0
    )
    assert kit.sink(task.drain(), "out") == [
        ("a", ["a", -500, 500, 1], 499),
        ("a", ["a", 0, 1000, 11], 999),
    ]
    task.end_input("events", 0, 0.0)
    assert kit.sink(task.drain(), "out") == [
        ("a", ["a", 500, 1500, 110], 1499),
        ("a", ["a", 1000, 2000, 100], 1999),
    ]


def test_hopping_out_of_order_and_late(kit: type[Kit]) -> None:
    task = kit.task(kit.window_job(Hopping(1000, 500), out_of_orderness_ms=200))
    task.feed_source("events", 0, kit.records([("a", 1, 1300)]), 0.0)  # wm 1100
    assert kit.sink(task.drain(), "out") == []
    # 450 belongs to [-500,500) (expired at wm 1100) and [0,1000) (expired too): late
    # 700 belongs to [0,1000) (expired) and [500,1500) (open): counted there.
    task.feed_source("events", 0, kit.records([("a", 1, 450), ("a", 1, 700)], 1), 0.0)
    assert task.metrics["late_dropped"] == 1
    task.end_input("events", 0, 0.0)
    assert kit.sink(task.drain(), "out") == [
        ("a", ["a", 500, 1500, 2], 1499),
        ("a", ["a", 1000, 2000, 1], 1999),
    ]


def test_reduce_keeps_the_maximum(kit: type[Kit]) -> None:
    task = kit.task(kit.window_job(Tumbling(1000), agg="max"))
    task.feed_source("events", 0, kit.records([("a", 3, 1), ("a", 9, 2), ("a", 4, 3)]), 0.0)
    task.end_input("events", 0, 0.0)
    assert kit.sink(task.drain(), "out") == [("a", ["a", 0, 1000, 9], 999)]


def test_window_fires_exactly_when_the_watermark_reaches_its_end(kit: type[Kit]) -> None:
    task = kit.task(kit.window_job(Tumbling(1000)))
    task.feed_source("events", 0, kit.records([("a", 1, 0), ("a", 1, 999)]), 0.0)
    assert kit.sink(task.drain(), "out") == []  # watermark 999: [0, 1000) still open
    task.feed_source("events", 0, kit.records([("b", 1, 1000)], 2), 0.0)
    assert kit.sink(task.drain(), "out") == [("a", ["a", 0, 1000, 2], 999)]


@pytest.mark.parametrize("backend", ["memory", "rocksdb"])
def test_a_large_firing_emits_every_window_in_order_in_bounded_batches(
    kit: type[Kit], tmp_path: Path, backend: str
) -> None:
    n = 2 * FIRE_BATCH + 7
    state = MemoryBackend() if backend == "memory" else RocksDBBackend(tmp_path)
    task = kit.task(kit.window_job(Tumbling(1000)), backend=state)
    rows = [(f"k{i:04d}", 1, 100 + i % 300) for i in range(n)]
    task.feed_source("events", 0, kit.records([*rows, ("k0003", 1, 999)]), 0.0)
    assert kit.sink(task.drain(), "out") == []
    task.feed_source("events", 0, kit.records([("z", 1, 1000)], n + 1), 0.0)
    out = task.drain()
    assert kit.sink(out, "out") == [
        (f"k{i:04d}", [f"k{i:04d}", 0, 1000, 2 if i == 3 else 1], 999) for i in range(n)
    ]
    sizes = [len(o.keys) for o in out if isinstance(o, OutputBatch) and o.topic == "out"]
    assert sizes == [FIRE_BATCH, FIRE_BATCH, 7]
    task.end_input("events", 0, 0.0)
    assert kit.sink(task.drain(), "out") == [("z", ["z", 1000, 2000, 1], 1999)]


def test_tumbling_windows_of_kafkas_largest_timestamps(kit: type[Kit]) -> None:
    """A window ending past 2**63 - 1 fires at the end of input and is stamped 2**63 - 1;
    one ending near 2**62 fires on the watermark."""
    top, big = 2**63 - 1, 2**62 + 1
    task = kit.task(kit.window_job(Tumbling(1000)))
    task.feed_source("events", 0, kit.records([("a", 1, big), ("a", 1, top), ("a", 1, top)]), 0.0)
    first = big - big % 1000
    assert kit.sink(task.drain(), "out") == [("a", ["a", first, first + 1000, 1], first + 999)]
    task.end_input("events", 0, 0.0)
    last = top - top % 1000
    assert kit.sink(task.drain(), "out") == [("a", ["a", last, last + 1000, 2], top)]
