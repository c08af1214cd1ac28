"""Session and sliding windows: exact outputs for in-order, out-of-order and late data."""

from __future__ import annotations

from kstream.api import Session, Sliding


def test_sliding_in_order_one_window_per_timestamp(kit):
    task = kit.task(kit.window_job(Sliding(1000)))
    task.feed_source("events", 0, kit.records([("a", 1, 1000), ("a", 1, 1500), ("a", 1, 2600)]), 0)
    assert kit.sink(task.drain(), "out") == [
        ("a", ["a", 1, 1001, 1], 1000),
        ("a", ["a", 501, 1501, 2], 1500),
    ]
    task.end_input("events", 0, 0.0)
    assert kit.sink(task.drain(), "out") == [("a", ["a", 1601, 2601, 1], 2600)]


def test_sliding_out_of_order(kit):
    task = kit.task(kit.window_job(Sliding(1000), out_of_orderness_ms=600))
    task.feed_source("events", 0, kit.records([("a", 1, 1500)]), 0.0)
    task.feed_source("events", 0, kit.records([("a", 1, 1000), ("b", 1, 1200)], 1), 0.0)
    assert kit.sink(task.drain(), "out") == []
    task.feed_source("events", 0, kit.records([("a", 1, 2600)], 3), 0.0)  # wm 2000
    assert kit.sink(task.drain(), "out") == [
        ("a", ["a", 1, 1001, 1], 1000),
        ("b", ["b", 201, 1201, 1], 1200),
        ("a", ["a", 501, 1501, 2], 1500),
    ]


def test_sliding_late_and_allowed_lateness(kit):
    task = kit.task(kit.window_job(Sliding(1000), allowed_lateness_ms=300))
    task.feed_source("events", 0, kit.records([("a", 1, 1000), ("b", 1, 1200)]), 0.0)
    assert kit.sink(task.drain(), "out") == [("a", ["a", 1, 1001, 1], 1000)]
    # 900 is behind the watermark (1200) but its window ends at 901 + 300 > 1200: kept;
    # it also lands in the fired window ending at 1001, which fires again.
    task.feed_source("events", 0, kit.records([("a", 1, 900)], 2), 0.0)
    assert kit.sink(task.drain(), "out") == [
        ("a", ["a", -99, 901, 1], 900),
        ("a", ["a", 1, 1001, 2], 1000),
    ]
    task.feed_source("events", 0, kit.records([("a", 1, 800)], 3), 0.0)  # 801 + 300 <= 1200
    assert kit.sink(task.drain(), "out") == []
    assert task.metrics["late_dropped"] == 1


def test_session_in_order(kit):
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


def test_session_out_of_order_record_merges_two_sessions(kit):
    task = kit.task(kit.window_job(Session(500), out_of_orderness_ms=1000, agg="sum"))
    task.feed_source("events", 0, kit.records([("a", 1, 100), ("a", 10, 1000)]), 0.0)
    task.feed_source("events", 0, kit.records([("a", 100, 550)], 2), 0.0)
    assert kit.sink(task.drain(), "out") == []
    task.end_input("events", 0, 0.0)
    assert kit.sink(task.drain(), "out") == [("a", ["a", 100, 1500, 111], 1499)]


def test_session_late_record_dropped_but_touching_record_extends(kit):
    task = kit.task(kit.window_job(Session(500)))
    task.feed_source("events", 0, kit.records([("a", 1, 100), ("a", 1, 2000)]), 0.0)
    assert kit.sink(task.drain(), "out") == [("a", ["a", 100, 600, 1], 599)]
    task.feed_source("events", 0, kit.records([("a", 1, 50), ("a", 1, 1800)], 2), 0.0)
    assert task.metrics["late_dropped"] == 1
    task.end_input("events", 0, 0.0)
    assert kit.sink(task.drain(), "out") == [("a", ["a", 1800, 2500, 2], 2499)]


def test_session_allowed_lateness_refires_merged_session(kit):
    task = kit.task(kit.window_job(Session(500), allowed_lateness_ms=1000))
    task.feed_source("events", 0, kit.records([("a", 1, 100), ("b", 1, 1000)]), 0.0)
    assert kit.sink(task.drain(), "out") == [("a", ["a", 100, 600, 1], 599)]
    task.feed_source("events", 0, kit.records([("a", 1, 300)], 2), 0.0)
    assert kit.sink(task.drain(), "out") == [("a", ["a", 100, 800, 2], 799)]
