"""Query reads against the tables real operators wrote: a key's value, its windows in a
time range (tumbling, hopping, sessions), process state, and key scans with a limit."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kstream.api import (
    Hopping,
    MapState,
    Session,
    Topology,
    Tumbling,
    ValueState,
    WatermarkStrategy,
)
from kstream.plan import plan_job
from kstream.query.operators import OperatorInfo, of_plan
from kstream.query.read import Query, Tables, read
from kstream.state.memory import MemoryBackend
from tests.conftest import Kit


def ask(info: OperatorInfo, backend: MemoryBackend, op: str, **params: Any) -> dict[str, Any]:
    q = Query.from_params(op, info.id, {k: str(v) for k, v in params.items()})
    return read(info, q, Tables.opened(info.id, backend.tables()))


def counted(kit: type[Kit], build: Any, rows: list[tuple[Any, Any, int]]) -> tuple[Any, Any]:
    """Run ``rows`` through a one-operator job (not ended: windows stay open)."""
    t = Topology("r")
    late = WatermarkStrategy(max_out_of_orderness_ms=100_000)  # every window stays open
    build(t.source("events", keyed=True, key_serde="str", watermark=late)).to("out")
    plan = plan_job(t, "r", {"events": 1})
    backend = MemoryBackend()
    task = kit.task(plan, backend=backend)
    task.feed_source("events", 0, kit.records(rows), 0.0)
    (info,) = of_plan(plan).values()
    return info, backend


def test_a_keys_tumbling_windows_in_a_time_range(kit: type[Kit]) -> None:
    rows = [("a", 1, 100), ("a", 1, 1100), ("b", 1, 1200), ("a", 1, 1300), ("a", 1, 5000)]
    info, backend = counted(kit, lambda s: s.window(Tumbling(1000), name="w").count(), rows)
    windows = [
        {"start": 0, "end": 1000, "value": 1},
        {"start": 1000, "end": 2000, "value": 2},
        {"start": 5000, "end": 6000, "value": 1},
    ]
    # By the window spec: one point lookup per window start in the range.
    assert ask(info, backend, "windows", key="a", **{"from": 0, "to": 9000}) == {
        "found": True, "windows": windows, "more": False,
    }  # fmt: skip
    assert ask(info, backend, "windows", key="a", at=1500)["windows"] == windows[1:2]
    assert ask(info, backend, "windows", key="a", **{"from": 0, "to": 9000}, limit=2) == {
        "found": True, "windows": windows[:2], "more": True,
    }  # fmt: skip
    # Without a range: every window held (a seek per window end).
    assert ask(info, backend, "get", key="a")["windows"] == windows
    assert ask(info, backend, "get", key="zz") == {"found": False, "windows": [], "more": False}
    spec_unknown = replace(info, windows=None)  # a stored read: one seek per window end
    assert ask(spec_unknown, backend, "windows", key="a", **{"from": 0, "to": 9000}) == {
        "found": True, "windows": windows, "more": False,
    }  # fmt: skip
    assert ask(spec_unknown, backend, "windows", key="a", at=1500)["windows"] == windows[1:2]
    assert ask(spec_unknown, backend, "windows", key="a", **{"from": 1})["windows"] == windows[1:]
    assert ask(info, backend, "scan", **{"from": 1000, "to": 1000})["entries"] == [
        {"key": "a", "start": 1000, "end": 2000, "value": 2},
        {"key": "b", "start": 1000, "end": 2000, "value": 1},
    ]


def test_hopping_and_session_windows(kit: type[Kit]) -> None:
    info, backend = counted(
        kit, lambda s: s.window(Hopping(1000, 500), name="h").count(), [("a", 1, 700)]
    )
    assert ask(info, backend, "windows", key="a", **{"from": -1000, "to": 2000})["windows"] == [
        {"start": 0, "end": 1000, "value": 1},
        {"start": 500, "end": 1500, "value": 1},
    ]
    info, backend = counted(
        kit,
        lambda s: s.window(Session(100), name="s").count(),
        [("a", 1, 10), ("a", 1, 50), ("a", 1, 500)],
    )
    assert ask(info, backend, "get", key="a")["windows"] == [
        {"start": 10, "end": 150, "value": 2},
        {"start": 500, "end": 600, "value": 1},
    ]
    assert ask(info, backend, "windows", key="a", **{"from": 100})["windows"] == [
        {"start": 500, "end": 600, "value": 1}
    ]


def test_rolling_values_and_scans_by_prefix_and_range(kit: type[Kit]) -> None:
    rows = [(k, 1, i) for i, k in enumerate(["ab", "abc", "b", "ab", "ba", "a"])]
    info, backend = counted(kit, lambda s: s.count(name="c"), rows)
    assert ask(info, backend, "get", key="ab") == {"found": True, "value": 2}
    assert ask(info, backend, "get", key="x") == {"found": False, "value": None}
    assert ask(info, backend, "scan", prefix="ab")["entries"] == [
        {"key": "ab", "value": 2},
        {"key": "abc", "value": 1},
    ]
    assert ask(info, backend, "scan", from_key="abc", to_key="ba") == {
        "entries": [{"key": "abc", "value": 1}, {"key": "b", "value": 1}], "more": False,
    }  # fmt: skip
    assert ask(info, backend, "scan", limit=2) == {
        "entries": [{"key": "a", "value": 1}, {"key": "ab", "value": 2}], "more": True,
    }  # fmt: skip


def test_process_state_by_name(kit: type[Kit]) -> None:
    def fn(key: Any, value: Any, ts: int, state: Any, out: Any) -> None:
        state["last"].set(value)
        state["seen"].put(str(ts), value)

    info, backend = counted(
        kit,
        lambda s: s.process(fn, state={"last": ValueState(), "seen": MapState()}, name="p"),
        [("a", 5, 1), ("a", 6, 2), ("b", 7, 3)],
    )
    assert ask(info, backend, "get", key="a") == {
        "found": True,
        "value": {"last": 6, "seen": [[["1"], 5], [["2"], 6]]},
    }
