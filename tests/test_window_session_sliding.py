"""Session and sliding windows: exact outputs for in-order, out-of-order and late data."""

from __future__ import annotations

from pathlib import Path

import pytest

from kstream.api import Session, Sliding
from kstream.state.memory import MemoryBackend
from kstream.state.rocksdb import RocksDBBackend
from tests.conftest import Kit


def test_sliding_windows_of_the_kafka_streams_javadoc_example(kit: type[Kit]) -> None:
    """SlidingWindows' javadoc (time difference 5000 ms; A@8000, A@9200, A@12400): five
    windows, [3000;8000] [4200;9200] [7400;12400] and right windows [8001;13001]
    [9201;14201] — here as [start, end) with end one past."""
    task = kit.task(kit.window_job(Sliding(5000)))
    task.feed_source("events", 0, kit.records([("A", 1, 8000), ("A", 1, 9200), ("A", 1, 12400)]), 0)
    assert kit.sink(task.drain(), "out") == [  # watermark 12400
        ("A", ["A", 3000, 8001, 1], 8000),
        ("A", ["A", 4200, 9201, 2], 9200),
    ]
    task.end_input("events", 0, 0.0)
    assert kit.sink(task.drain(), "out") == [
        ("A", ["A", 7400, 12401, 3], 12400),
        ("A", ["A", 8001, 13002, 2], 13001),
        ("A", ["A", 9201, 14202, 1], 14201),
    ]


def test_sliding_out_of_order_record_fills_a_right_window(kit: type[Kit]) -> None:
    task = kit.task(kit.window_job(Sliding(1000), out_of_orderness_ms=5000))
    task.feed_source("events", 0, kit.records([("a", 1, 1500)]), 0.0)
    task.feed_source("events", 0, kit.records([("a", 1, 1000), ("b", 1, 1200)], 1), 0.0)
    task.end_input("events", 0, 0.0)
    assert kit.sink(task.drain(), "out") == [
        ("a", ["a", 0, 1001, 1], 1000),
        ("b", ["b", 200, 1201, 1], 1200),
        ("a", ["a", 500, 1501, 2], 1500),
        ("a", ["a", 1001, 2002, 1], 2001),  # right window of 1000 holds 1500
    ]


def test_sliding_late_and_allowed_lateness(kit: type[Kit]) -> None:
    # Times from B on: a source accepts only Kafka's timestamp range (0 .. 2**63-1).
    B = 10_000
    task = kit.task(kit.window_job(Sliding(999), allowed_lateness_ms=300))
    task.feed_source("events", 0, kit.records([("a", 1, B + 1000), ("b", 1, B + 1200)]), 0.0)
    assert kit.sink(task.drain(), "out") == [("a", ["a", B + 1, B + 1001, 1], B + 1000)]
    # B+900 is behind the watermark (B+1200): its left window [B-99, B+901) ends within
    # the lateness (901 + 300 > 1200) and fires at once; the fired window ending at
    # B+1001 fires again with it; its right window [B+901, B+1901) is not due yet.
    task.feed_source("events", 0, kit.records([("a", 1, B + 900)], 2), 0.0)
    assert kit.sink(task.drain(), "out") == [
        ("a", ["a", B - 99, B + 901, 1], B + 900),
        ("a", ["a", B + 1, B + 1001, 2], B + 1000),
    ]
    # Every window that could hold B-200 ends by B-200 + 1000 <= B+1200 - 300: late.
    task.feed_source("events", 0, kit.records([("a", 1, B - 200)], 3), 0.0)
    assert kit.sink(task.drain(), "out") == []
    assert task.metrics["late_dropped"] == 1
    task.end_input("events", 0, 0.0)
    assert kit.sink(task.drain(), "out") == [
        ("b", ["b", B + 201, B + 1201, 1], B + 1200),
        ("a", ["a", B + 901, B + 1901, 1], B + 1900),
    ]


def test_session_in_order(kit: type[Kit]) -> None:
    task = kit.task(kit.window_job(Session(500)))
    task.feed_source(
        "events",
        0,
        kit.records([("a", 1, 100), ("b", 1, 200), ("a", 1, 300), ("a", 1, 1000)]),
        0.0,
    )
    assert kit.sink(task.drain(), "out") == [
        ("b", ["b", 200, 700, 1], 699),
        ("a", ["a", 100, 800, 2], 799),
    ]
    task.end_input("events", 0, 0.0)
    assert kit.sink(task.drain(), "out") == [("a", ["a", 1000, 1500, 1], 1499)]


def test_session_out_of_order_record_merges_two_sessions(kit: type[Kit]) -> None:
    task = kit.task(kit.window_job(Session(500), out_of_orderness_ms=1000, agg="sum"))
    task.feed_source("events", 0, kit.records([("a", 1, 100), ("a", 10, 1000)]), 0.0)
    task.feed_source("events", 0, kit.records([("a", 100, 550)], 2), 0.0)
    assert kit.sink(task.drain(), "out") == []
    task.end_input("events", 0, 0.0)
    assert kit.sink(task.drain(), "out") == [("a", ["a", 100, 1500, 111], 1499)]


def test_session_late_record_dropped_but_touching_record_extends(kit: type[Kit]) -> None:
    task = kit.task(kit.window_job(Session(500)))
    task.feed_source("events", 0, kit.records([("a", 1, 100), ("a", 1, 2000)]), 0.0)
    assert kit.sink(task.drain(), "out") == [("a", ["a", 100, 600, 1], 599)]
    task.feed_source("events", 0, kit.records([("a", 1, 50), ("a", 1, 1800)], 2), 0.0)
    assert task.metrics["late_dropped"] == 1
    task.end_input("events", 0, 0.0)
    assert kit.sink(task.drain(), "out") == [("a", ["a", 1800, 2500, 2], 2499)]


def test_session_allowed_lateness_refires_merged_session(kit: type[Kit]) -> None:
    task = kit.task(kit.window_job(Session(500), allowed_lateness_ms=1000))
    task.feed_source("events", 0, kit.records([("a", 1, 100), ("b", 1, 1000)]), 0.0)
    assert kit.sink(task.drain(), "out") == [("a", ["a", 100, 600, 1], 599)]
    task.feed_source("events", 0, kit.records([("a", 1, 300)], 2), 0.0)
    assert kit.sink(task.drain(), "out") == [("a", ["a", 100, 800, 2], 799)]


def test_touching_sessions_merge_whatever_other_keys_do(kit: type[Kit]) -> None:
    """Gap semantics: records at most ``gap`` apart share a session (Flink's merging of
    ``[t, t + gap)`` windows that intersect or touch; Kafka Streams' ``<= gap``)."""
    alone = kit.task(kit.window_job(Session(10)))
    alone.feed_source("events", 0, kit.records([("A", 1, 0), ("A", 1, 10)]), 0.0)
    alone.end_input("events", 0, 0.0)
    with_b = kit.task(kit.window_job(Session(10)))
    with_b.feed_source("events", 0, kit.records([("A", 1, 0), ("B", 1, 10), ("A", 1, 10)]), 0.0)
    with_b.end_input("events", 0, 0.0)
    assert kit.sink(alone.drain(), "out") == [("A", ["A", 0, 20, 2], 19)]
    assert sorted(kit.sink(with_b.drain(), "out")) == [
        ("A", ["A", 0, 20, 2], 19),
        ("B", ["B", 10, 20, 1], 19),
    ]


def test_a_session_fires_and_expires_only_once_the_watermark_passed_its_end(kit: type[Kit]) -> None:
    task = kit.task(kit.window_job(Session(10)))
    task.feed_source("events", 0, kit.records([("A", 1, 0), ("B", 1, 10)]), 0.0)
    assert kit.sink(task.drain(), "out") == []  # watermark 10 == end of A's [0, 10)
    task.feed_source("events", 0, kit.records([("A", 1, 10)], 2), 0.0)  # not late: joins
    task.feed_source("events", 0, kit.records([("B", 1, 21)], 3), 0.0)  # watermark 21
    assert kit.sink(task.drain(), "out") == [
        ("A", ["A", 0, 20, 2], 19),
        ("B", ["B", 10, 20, 1], 19),
    ]
    task.feed_source("events", 0, kit.records([("A", 1, 5)], 4), 0.0)  # [5, 15): expired
    assert task.metrics["late_dropped"] == 1


@pytest.mark.parametrize("rocksdb", [False, True])
def test_timestamps_up_to_kafkas_largest_fire_and_expire(
    kit: type[Kit], tmp_path: Path, rocksdb: bool
) -> None:
    """Event times near 2**62 and 2**63 - 1 (Kafka's largest) are windowed exactly; a
    result whose end lies beyond Kafka's range is stamped 2**63 - 1."""
    big, top = 2**62 + 5, 2**63 - 1
    backend = RocksDBBackend(tmp_path / "db") if rocksdb else MemoryBackend()
    task = kit.task(kit.window_job(Session(10)), backend=backend)
    task.feed_source("events", 0, kit.records([("a", 1, big), ("a", 1, big + 10)]), 0.0)
    task.feed_source("events", 0, kit.records([("b", 1, top - 3), ("b", 1, top)], 2), 0.0)
    assert kit.sink(task.drain(), "out") == [("a", ["a", big, big + 20, 2], big + 19)]
    task.end_input("events", 0, 0.0)
    assert kit.sink(task.drain(), "out") == [("b", ["b", top - 3, top + 10, 2], top)]
    assert task.metrics["late_dropped"] == 0
