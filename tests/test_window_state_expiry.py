"""Fixed windows keep exactly the windows that can still change: a window's accumulator
is deleted once the watermark passes ``end + allowed lateness`` — also when a
watermark step crosses no window end (no state scan then) and for offset windows."""

from __future__ import annotations

from kstream.api import Hopping, Tumbling
from kstream.state.memory import MemoryBackend
from tests.conftest import Kit


def _windows(backend: MemoryBackend) -> list[tuple[int, int, str]]:
    """The (end, start, key) accumulators held by the window operator (stage0.window0)."""
    return [k for k, _ in backend.tables()["stage0.window0.acc"].scan()]


def test_offset_tumbling_drops_each_window_when_it_fires(kit: type[Kit]) -> None:
    backend = MemoryBackend()
    task = kit.task(kit.window_job(Tumbling(1000, offset_ms=300)), backend=backend)
    task.feed_source("events", 0, kit.records([("a", 1, 250), ("b", 1, 280)]), 0.0)
    assert _windows(backend) == [(300, -700, "a"), (300, -700, "b")]
    task.feed_source("events", 0, kit.records([("a", 1, 299)], 2), 0.0)  # no end crossed
    assert kit.sink(task.drain(), "out") == []
    assert _windows(backend) == [(300, -700, "a"), (300, -700, "b")]
    task.feed_source("events", 0, kit.records([("b", 1, 300)], 3), 0.0)  # wm 300 = end
    assert kit.sink(task.drain(), "out") == [
        ("a", ["a", -700, 300, 2], 299),
        ("b", ["b", -700, 300, 1], 299),
    ]
    assert _windows(backend) == [(1300, 300, "b")]
    task.feed_source("events", 0, kit.records([("a", 1, 1299)], 4), 0.0)
    assert kit.sink(task.drain(), "out") == []
    assert _windows(backend) == [(1300, 300, "a"), (1300, 300, "b")]
    task.feed_source("events", 0, kit.records([("a", 1, 5000)], 5), 0.0)  # crosses 4 ends
    assert kit.sink(task.drain(), "out") == [
        ("a", ["a", 300, 1300, 1], 1299),
        ("b", ["b", 300, 1300, 1], 1299),
    ]
    assert _windows(backend) == [(5300, 4300, "a")]


def test_hopping_with_lateness_keeps_windows_until_end_plus_lateness(kit: type[Kit]) -> None:
    backend = MemoryBackend()
    task = kit.task(kit.window_job(Hopping(1000, 400), allowed_lateness_ms=300), backend=backend)
    task.feed_source("events", 0, kit.records([("a", 1, 100)]), 0.0)
    assert _windows(backend) == [(200, -800, "a"), (600, -400, "a"), (1000, 0, "a")]
    task.feed_source("events", 0, kit.records([("b", 1, 450)], 1), 0.0)  # wm 450
    assert kit.sink(task.drain(), "out") == [("a", ["a", -800, 200, 1], 199)]
    # End 200 + lateness 300 = 500 > 450: the fired window is kept and refires for a
    # record within the lateness.
    assert (200, -800, "a") in _windows(backend)
    task.feed_source("events", 0, kit.records([("a", 1, 150)], 2), 0.0)
    assert kit.sink(task.drain(), "out") == [("a", ["a", -800, 200, 2], 199)]
    task.feed_source("events", 0, kit.records([("b", 1, 500)], 3), 0.0)  # wm 500
    assert (200, -800, "a") not in _windows(backend)
    task.feed_source("events", 0, kit.records([("b", 1, 2000)], 4), 0.0)  # wm 2000
    task.drain()
    assert all(end > 2000 - 300 for end, _, _ in _windows(backend))
    task.end_input("events", 0, 0.0)
    task.drain()
    assert _windows(backend) == []
