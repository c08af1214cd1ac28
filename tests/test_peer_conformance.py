"""Window, session, lateness and join cases from the peers' own tests, run on kstream.

Each test names the peer test whose case it mirrors (the documented semantics, not
their code) and maps the peer's conventions onto kstream's:

* Flink's watermark ``W`` means "no more records at or below ``W``"; kstream's ``W``
  means "none below ``W``", so Flink's ``W`` is kstream's ``W + 1``. Both window
  ends are exclusive and both fire a late element's window once per element.
* Kafka Streams' stream time is the largest timestamp seen, its grace is kstream's
  ``allowed_lateness_ms`` with out-of-orderness 0; final results are what Kafka
  Streams emits with ``EmitStrategy.onWindowClose()``/``suppress(untilWindowCloses)``.
  Session and sliding windows report inclusive ends there (kstream: see each case).
* Quix Streams' ``grace_ms`` closes a window at ``latest timestamp - grace``: kstream's
  ``max_out_of_orderness_ms`` with no allowed lateness.

Where kstream differs on purpose, docs/guide.md's "Windows compared with the peers"
lists it and the case here asserts kstream's documented behaviour.
"""

from __future__ import annotations

import itertools
from typing import Any

from kstream.api import Hopping, Session, Sliding, Topology, Tumbling, WatermarkStrategy
from kstream.plan import plan_job
from kstream.runtime import Task

TICK = "~"  # a key whose records only move the watermark; its windows are ignored


def results(kit: Any, task: Task) -> list[tuple[Any, ...]]:
    return [tuple(v) for k, v, _ in kit.sink(task.drain(), "out") if k != TICK]


_offsets = itertools.count()


def feed(kit: Any, task: Task, rows: list[tuple[str, Any, int]]) -> None:
    """One record per batch (the peers' tests process element by element)."""
    for r in rows:
        task.feed_source("events", 0, kit.records([r], next(_offsets)), 0.0)


# ---- Flink: WindowOperatorTest ---------------------------------------------------------


def test_flink_tumbling_event_time_windows(kit: Any) -> None:
    """WindowOperatorTest#testTumblingEventTimeWindows: size 3 s, out-of-order elements;
    watermark 2999 (Flink) fires [0, 3000) for both keys, the rest fires later."""
    task = kit.task(kit.window_job(Tumbling(3000), out_of_orderness_ms=4000, agg="sum"))
    feed(kit, task, [("key2", 1, 3999), ("key2", 1, 3000), ("key1", 1, 20), ("key1", 1, 0)])
    feed(kit, task, [("key1", 1, 999), ("key2", 1, 1998), ("key2", 1, 1999), ("key2", 1, 1000)])
    assert results(kit, task) == []
    feed(kit, task, [(TICK, 0, 7000)])  # kstream watermark 3000 = Flink's 2999
    assert sorted(results(kit, task)) == [("key1", 0, 3000, 3), ("key2", 0, 3000, 3)]
    task.end_input("events", 0, 0.0)
    assert results(kit, task) == [("key2", 3000, 6000, 2)]


def test_flink_session_windows_merge_when_they_touch(kit: Any) -> None:
    """WindowOperatorTest#testSessionWindows (gap 3 s, sum): each element opens
    [t, t + gap) and windows that intersect merge — TimeWindow.intersects is inclusive,
    so sessions that only touch merge too (key3)."""
    task = kit.task(kit.window_job(Session(3000), out_of_orderness_ms=10_000, agg="sum"))
    feed(kit, task, [("key2", 1, 0), ("key2", 2, 1000), ("key2", 3, 2500)])
    feed(kit, task, [("key1", 1, 10), ("key1", 2, 1000)])
    feed(kit, task, [("key3", 1, 0), ("key3", 1, 3000)])  # touching: [0, 3000) + [3000, 6000)
    feed(kit, task, [("key2", 4, 5501)])  # 5501 > 2500 + 3000: a new session
    task.end_input("events", 0, 0.0)
    assert sorted(results(kit, task)) == [
        ("key1", 10, 4000, 3),
        ("key2", 0, 5500, 6),
        ("key2", 5501, 8501, 4),
        ("key3", 0, 6000, 2),
    ]


def test_flink_allowed_lateness_fires_per_late_element_then_drops(kit: Any) -> None:
    """WindowOperatorTest#testLateness / #testSideOutputDueToLatenessTumbling: tumbling
    2 s, allowed lateness 500 ms. A late element within the lateness fires its window
    again (once per element); after the window's cleanup time (max timestamp + lateness
    <= watermark) an element for it goes to the late side output."""
    task = kit.task(kit.window_job(Tumbling(2000), allowed_lateness_ms=500, late_output=True))
    feed(kit, task, [("k", 1, 500), (TICK, 0, 2000)])  # Flink watermark 1999
    assert results(kit, task) == [("k", 0, 2000, 1)]
    feed(kit, task, [("k", 1, 1000), ("k", 1, 1200)])
    assert results(kit, task) == [("k", 0, 2000, 2), ("k", 0, 2000, 3)]
    feed(kit, task, [(TICK, 0, 2500)])  # Flink watermark 2499: cleanup of [0, 2000)
    feed(kit, task, [("k", 1, 1500)])
    out = task.drain()
    assert kit.sink(out, "late") == [("k", 1, 1500)] and kit.sink(out, "out") == []
    assert task.metrics["late_side_output"] == 1


# ---- Kafka Streams ---------------------------------------------------------------------

GAP = 300_000


def test_kafka_streams_multiple_sessions_and_merging(kit: Any) -> None:
    """KStreamSessionWindowAggregateProcessorTest#shouldHandleMultipleSessionsAndMerging
    (gap 5 min, count). Kafka Streams reports [first, last] (inclusive); kstream reports
    [first, last + gap), so each end below is the peer's last + GAP."""
    task = kit.task(kit.window_job(Session(GAP), out_of_orderness_ms=GAP))
    feed(kit, task, [("a", 1, 0), ("b", 1, 0), ("c", 1, 0), ("d", 1, 0), ("d", 1, GAP // 2)])
    feed(kit, task, [("a", 1, GAP + 1), ("b", 1, GAP + 1)])
    feed(kit, task, [("a", 1, GAP + 1 + GAP // 2), ("c", 1, GAP + 1 + GAP // 2)])
    task.end_input("events", 0, 0.0)
    assert sorted(results(kit, task)) == [
        ("a", 0, 0 + GAP, 1),
        ("a", GAP + 1, GAP + 1 + GAP // 2 + GAP, 2),
        ("b", 0, 0 + GAP, 1),
        ("b", GAP + 1, GAP + 1 + GAP, 1),
        ("c", 0, 0 + GAP, 1),
        ("c", GAP + 1 + GAP // 2, GAP + 1 + GAP // 2 + GAP, 1),
        ("d", 0, GAP // 2 + GAP, 2),
    ]


def test_kafka_streams_late_session_record_differs_on_purpose(kit: Any) -> None:
    """KStreamSessionWindowAggregateProcessorTest#shouldLogAndMeterWhenSkippingLate
    RecordWithZeroGrace: gap 10 ms, grace 0, stream time 1; Kafka Streams drops a
    record at 0 (its session [0, 0] ends before stream time). kstream keeps it: its
    session [0, 10) is still open at watermark 1 (Flink's rule; see docs/guide.md)."""
    task = kit.task(kit.window_job(Session(10)))
    feed(kit, task, [("dummy", 1, 0), ("OnTime1", 1, 0), ("dummy", 1, 1), ("Late1", 1, 0)])
    task.end_input("events", 0, 0.0)
    assert ("Late1", 0, 10, 1) in results(kit, task)
    assert task.metrics["late_dropped"] == 0


def test_kafka_streams_tumbling_grace_drops_expired_windows(kit: Any) -> None:
    """KStreamWindowAggregateTest#shouldLogAndMeterWhenSkippingExpiredWindowByGrace:
    windows of 10 ms with grace 90 ms; a record is dropped once its window's end +
    grace is at or below stream time (the largest timestamp seen)."""
    task = kit.task(kit.window_job(Tumbling(10), allowed_lateness_ms=90))
    feed(kit, task, [("k", 1, 100), ("k", 1, 0)])  # window [0, 10): 10 + 90 <= 100
    feed(kit, task, [("k", 1, 1)])
    feed(kit, task, [("k", 1, 13)])  # window [10, 20): 20 + 90 > 100, kept (fires at once)
    assert results(kit, task) == [("k", 10, 20, 1)]
    assert task.metrics["late_dropped"] == 2


def test_kafka_streams_stream_stream_join_window_is_inclusive(kit: Any) -> None:
    """KStreamKStreamJoinTest#testWindowing: JoinWindows of 100 ms join records at most
    100 ms apart, on both sides, inclusive; the result carries the larger timestamp."""
    t = Topology("j")
    left = t.source("left", keyed=True, watermark=WatermarkStrategy(10_000))
    right = t.source("right", keyed=True, watermark=WatermarkStrategy(10_000))
    left.join(right, lambda a, b: f"{a}+{b}", within_ms=100).to("out")
    task = kit.task(plan_job(t, "j", {"left": 1, "right": 1}))
    task.feed_source("left", 0, kit.records([("0", "L", 1000)]), 0.0)
    right_rows = [
        ("0", "r-101", 899),
        ("0", "r-100", 900),
        ("0", "r+100", 1100),
        ("0", "r+101", 1101),
    ]
    task.feed_source("right", 0, kit.records(right_rows), 0.0)
    assert kit.sink(task.drain(), "out") == [("0", "L+r-100", 1000), ("0", "L+r+100", 1100)]


def test_kafka_streams_join_record_behind_the_watermark_differs_on_purpose(kit: Any) -> None:
    """KStreamKStreamJoinTest (grace): JoinWindows of 100 ms, no grace; after records at
    1000 on both sides, a left record at 950 still has an open join window ([850; 1050]
    ends after stream time 1000), so Kafka Streams joins it with the right record at
    1000. kstream judges a join record by its own timestamp (Flink's interval join): 950
    is behind the watermark 1000 and dropped as late (see docs/guide.md, Joins)."""
    t = Topology("j")
    left = t.source("left", keyed=True, watermark=WatermarkStrategy(0))
    right = t.source("right", keyed=True, watermark=WatermarkStrategy(0))
    left.join(right, lambda a, b: f"{a}+{b}", within_ms=100).to("out")
    task = kit.task(plan_job(t, "j", {"left": 1, "right": 1}))
    task.feed_source("left", 0, kit.records([("0", "L1000", 1000)]), 0.0)
    task.feed_source("right", 0, kit.records([("0", "R1000", 1000)]), 0.0)
    task.feed_source("left", 0, kit.records([("0", "L950", 950)], 1), 0.0)
    assert kit.sink(task.drain(), "out") == [("0", "L1000+R1000", 1000)]
    assert task.metrics["late_dropped"] == 1


def test_kafka_streams_sliding_windows_created_and_dropped_out(kit: Any) -> None:
    """KStreamSlidingWindowAggregateTest (and the SlidingWindows javadoc): time difference
    10; a window for each record entering (left) and each record dropping out (right,
    when non-empty). Kafka Streams reports [start, end] inclusive; kstream's end is
    one past. Records before the time difference are not clipped to start at 0 here
    (see docs/guide.md)."""
    task = kit.task(kit.window_job(Sliding(10), out_of_orderness_ms=100))
    feed(kit, task, [("A", 1, 15), ("A", 1, 20), ("A", 1, 30)])
    task.end_input("events", 0, 0.0)
    assert results(kit, task) == [
        ("A", 5, 16, 1),  # [5;15]
        ("A", 10, 21, 2),  # [10;20]
        ("A", 16, 27, 1),  # [16;26]: 15 dropped out (right window of 15)
        ("A", 20, 31, 2),  # [20;30]
        ("A", 21, 32, 1),  # [21;31]: 20 dropped out
    ]


# ---- Quix Streams ----------------------------------------------------------------------


def test_quix_tumbling_grace_closes_windows_and_drops_late_records(kit: Any) -> None:
    """test_tumbling.py (final() with grace_ms): tumbling 10 ms, grace 5 ms; the window
    closes when the latest timestamp minus grace reaches its end, and a record for a
    closed window is dropped."""
    task = kit.task(kit.window_job(Tumbling(10), out_of_orderness_ms=5))
    feed(kit, task, [("k", 1, 0), ("k", 1, 9)])
    assert results(kit, task) == []
    feed(kit, task, [("k", 1, 15)])  # 15 - 5 = 10: [0, 10) closes
    assert results(kit, task) == [("k", 0, 10, 2)]
    feed(kit, task, [("k", 1, 4), ("k", 1, 11)])  # 4: late; 11: [10, 20)
    task.end_input("events", 0, 0.0)
    assert results(kit, task) == [("k", 10, 20, 2)]
    assert task.metrics["late_dropped"] == 1


def test_quix_hopping_windows_of_one_record(kit: Any) -> None:
    """test_hopping.py: a hopping window of 10 ms stepping 5 ms puts a record at 7 into
    [0, 10) and [5, 15)."""
    task = kit.task(kit.window_job(Hopping(10, 5)))
    feed(kit, task, [("k", 1, 7)])
    task.end_input("events", 0, 0.0)
    assert results(kit, task) == [("k", 0, 10, 1), ("k", 5, 15, 1)]


def test_quix_hopping_updates_come_earliest_window_first(kit: Any) -> None:
    """test_hopping.py (current()): a record's hopping windows update in order of start,
    earliest first (Kafka Streams' TimeWindows.windowsFor likewise); windows of 10 ms
    stepping 5 ms, records at 7 and 12."""
    task = kit.task(kit.window_job(Hopping(10, 5), emit="update"))
    feed(kit, task, [("k", 1, 7), ("k", 1, 12)])
    assert results(kit, task) == [
        ("k", 0, 10, 1),
        ("k", 5, 15, 1),
        ("k", 5, 15, 2),
        ("k", 10, 20, 1),
    ]


def test_hopping_windows_before_zero_are_opened_on_purpose(kit: Any) -> None:
    """Kafka Streams and Quix open no window that starts before 0 (a record at 3 is in
    [0, 10) only); kstream keeps the grid (Flink's rule): every record is in size /
    advance windows, here also [-5, 5) (see docs/guide.md)."""
    task = kit.task(kit.window_job(Hopping(10, 5)))
    feed(kit, task, [("k", 1, 3)])
    task.end_input("events", 0, 0.0)
    assert results(kit, task) == [("k", -5, 5, 1), ("k", 0, 10, 1)]


def test_kafka_streams_sliding_updates_once_per_record_and_window(kit: Any) -> None:
    """KStreamSlidingWindowAggregateTest (without suppression): each record updates each
    window it changes once. Time difference 5, records at 5, 7, 11: the record at 11
    changes [6;11] (the left window of 11, also the right window of 5) and [8;13] (the
    right window of 7)."""
    task = kit.task(kit.window_job(Sliding(5), emit="update"))
    feed(kit, task, [("k", 1, 5), ("k", 1, 7), ("k", 1, 11)])
    assert results(kit, task) == [
        ("k", 0, 6, 1),  # [0;5]
        ("k", 2, 8, 2),  # [2;7]
        ("k", 6, 12, 1),  # [6;11]: right window of 5
        ("k", 6, 12, 2),  # [6;11]: the record at 11
        ("k", 8, 14, 1),  # [8;13]: right window of 7
    ]


def test_kafka_streams_sliding_update_skips_an_unchanged_right_window(kit: Any) -> None:
    """KStreamSlidingWindowAggregateTest (out-of-order record): time difference 5, a
    record at 11, then one at 5 (6 earlier). The right window of 5, [6;11], is the left
    window of 11 and does not hold 5: it is unchanged and not emitted again."""
    task = kit.task(kit.window_job(Sliding(5), out_of_orderness_ms=100, emit="update"))
    feed(kit, task, [("k", 1, 11), ("k", 1, 5)])
    assert results(kit, task) == [("k", 6, 12, 1), ("k", 0, 6, 1)]


# ---- Kafka Streams: records with a None value ------------------------------------------

_ABC = [("1", "A", 1), ("2", "B", 2), ("1", "C", 3), ("1", "D", 4), ("3", "E", 5),
        ("3", "F", 6), ("3", None, 7)]  # fmt: skip


def _aggregated(kit: Any, build: Any) -> tuple[dict[str, Any], int]:
    """``_ABC`` through ``build(keyed stream)``: each key's largest output (its last one,
    or its fullest window's), and the ``null_values_skipped`` counter."""
    t = Topology("n")
    build(t.source("events", keyed=True)).to("out")
    task = kit.task(plan_job(t, "n", {"events": 1}))
    feed(kit, task, _ABC)
    task.end_input("events", 0, 0.0)
    outputs: dict[str, list[Any]] = {}
    for k, v, _ in kit.sink(task.drain(), "out"):
        outputs.setdefault(k, []).append(v)
    largest = {
        k: max(vs, key=lambda v: v if isinstance(v, int) else len(v)) for k, vs in outputs.items()
    }
    return largest, task.metrics["null_values_skipped"]


def test_kafka_streams_rolling_aggregations_skip_none_values(kit: Any) -> None:
    """KGroupedStreamImplTest#shouldReduce / #shouldCount / #shouldAggregate: records
    whose value is null are skipped (a plain ``a + "+" + b`` reducer never sees one)."""
    assert _aggregated(kit, lambda s: s.reduce(lambda a, b: a + "+" + b)) == (
        {"1": "A+C+D", "2": "B", "3": "E+F"},
        1,
    )
    assert _aggregated(kit, lambda s: s.count()) == ({"1": 3, "2": 1, "3": 2}, 1)
    assert _aggregated(kit, lambda s: s.aggregate(lambda: "0", lambda a, v: a + "+" + v)) == (
        {"1": "0+A+C+D", "2": "0+B", "3": "0+E+F"},
        1,
    )


def test_kafka_streams_windowed_aggregations_skip_none_values(kit: Any) -> None:
    """KGroupedStreamImplTest#shouldReduceWindowed / #shouldCountSessionWindows: the
    same for tumbling, hopping, sliding and session windows."""

    def reduce(spec: Any) -> Any:
        return lambda s: s.window(spec).reduce(lambda a, b: a + "+" + b).map(lambda r: r.value)

    for spec in (Tumbling(100), Hopping(100, 50), Sliding(100)):
        assert _aggregated(kit, reduce(spec)) == ({"1": "A+C+D", "2": "B", "3": "E+F"}, 1)
    session = lambda s: s.window(Session(100)).count().map(lambda r: r.value)  # noqa: E731
    assert _aggregated(kit, session) == ({"1": 3, "2": 1, "3": 2}, 1)
