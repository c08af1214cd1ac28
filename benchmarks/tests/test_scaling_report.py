"""SCALING.md's tables and verdicts from rows (no broker)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import scaling
from benchmarks.report import kept_sections
from benchmarks.scaling import FULL, Point, measure, points, report, target_lines
from benchmarks.scaling_runs import (
    ChangedInterval,
    Env,
    LatencyRow,
    OutputRow,
    Results,
    StateRow,
    latency_medians,
)


def state_row(keys: int, uploads: list[int], state: int) -> StateRow:
    changed = tuple(ChangedInterval(keys // 100, u, 200.0, state) for u in uploads)
    return StateRow(keys, True, 5.0, keys, 10.0, 300.0, state, 150.0, changed, 1)


def test_upload_share_verdicts_tell_typical_from_mean() -> None:
    res = Results()
    res.state.append(state_row(1_000_000, [30, 30, 260, 30], 1000))  # median 3 %, mean 8.75 %
    lines = target_lines(res)
    assert any("(median) | 3.0 % | met |" in line for line in lines)
    assert any("max 26.0 %) | 8.8 % | MISSED |" in line for line in lines)


def test_latency_and_rss_bound_verdicts() -> None:
    res = Results()
    res.latency += [LatencyRow(1.0, 2000, 20000, 600.0, 1900.0, 2000.0),
                    LatencyRow(0.2, 2000, 20000, 300.0, 700.0, 800.0)]  # fmt: skip
    res.outputs += [OutputRow(1_000_000, 64.0, 300.0, 6.0, 1_000_000),
                    OutputRow(1_000_000, None, 480.0, 6.0, 1_000_000),
                    OutputRow(2_000_000, 64.0, 310.0, 12.0, 2_000_000),
                    OutputRow(2_000_000, None, 800.0, 12.0, 2_000_000)]  # fmt: skip
    lines = target_lines(res)
    assert any("(1 s) | 1.90x (1900 ms) | met |" in line for line in lines)
    assert any("(0.2 s) | 3.50x (700 ms) | MISSED |" in line for line in lines)
    assert any("| 300 -> 310 MB; unbounded 800 MB | met |" in line for line in lines)


def test_report_lists_every_interval_and_what_was_not_measured() -> None:
    res = Results(failures=["state of 10,000,000 keys: skipped"])
    res.state.append(state_row(100_000, [30, 40], 1000))
    text = "\n".join(report(res, FULL, ["# head"], {}))
    assert "- 100,000 keys: 3.0 %, 4.0 %" in text
    assert "## Not measured\n\n- state of 10,000,000 keys: skipped" in text


def test_points_run_smallest_first_and_a_spent_budget_skips_the_rest() -> None:
    env = Env("127.0.0.1:1", 4, Path("/nonexistent"), 60.0)
    pts = points(env, FULL, Results())
    sizes = [p.size for p in pts]
    assert sizes == sorted(sizes)
    big = [p.what for p in pts if p.size == 10_000_000]
    assert big[0].startswith("state of 10,000,000 keys") and big[0].endswith("wiped")
    assert big[1].startswith("w2 throughput") and big[2].endswith("state kept")
    assert all(p.limit_s == FULL.large_limit_s for p in pts if p.size > FULL.small_max)
    # w2's points cost by their records (at least 1 M), not by their keys
    assert [p.units for p in pts if p.series == "keys"] == [10**6, 10**6, 10**6, 10**7]
    res = measure(env, FULL, budget_s=0.0)  # nothing starts
    assert len(res.failures) == len(pts) and all("skipped" in f for f in res.failures)
    assert isinstance(pts[0], Point)


def test_a_point_that_would_not_end_within_the_budget_is_skipped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Estimated from the previous point of its series, scaled by work."""
    clock = [0.0]
    ran: list[str] = []

    def point(what: str, size: int, seconds: float, series: str, work: int = 0) -> Point:
        def run() -> None:
            ran.append(what)
            clock[0] += seconds

        return Point(what, size, 600.0, run, series, work)

    plan = [
        point("a 10", 10, 10.0, "a"),  # 1 s per unit of work (its size)
        point("b 10", 10, 5.0, "b"),
        # work 40 (by its size 400 s): 40 s expected, 85 s left: runs
        point("a 400", 400, 40.0, "a", work=40),
        point("b 100", 100, 50.0, "b"),  # 50 s expected, 45 s left: skipped
        point("c 1000", 1000, 50.0, "c"),  # nothing to go by: runs (ends past the budget)
        point("a 100", 100, 100.0, "a"),  # the budget is spent
    ]
    monkeypatch.setattr(scaling, "points", lambda *_args: plan)
    monkeypatch.setattr(scaling.time, "monotonic", lambda: clock[0])
    env = Env("127.0.0.1:1", 4, Path("/nonexistent"), 60.0, say=lambda _text: None)
    res = measure(env, FULL, budget_s=100.0)
    assert ran == ["a 10", "b 10", "a 400", "c 1000"]
    assert res.failures == [
        "b 100: skipped, about 50 s by the previous point of its series, 45 s of the run's "
        "time budget (100 s) left",
        "a 100: skipped, the run's time budget (100 s) was spent",
    ]


def test_latency_runs_are_interleaved_and_reported_as_medians() -> None:
    env = Env("127.0.0.1:1", 4, Path("/nonexistent"), 60.0)
    pts = points(env, FULL, Results())
    # first of all, the freshly started broker is warmed up by a run nobody reports
    assert pts[0].what == "broker warm-up: the latency job for 30 s, not reported"
    assert [p.what for p in pts].count(pts[0].what) == 1
    lat = [p.what for p in pts if p.what.startswith("latency")]
    assert lat[:4] == [
        "latency, checkpoints every 0.2 s (run 1/3)",
        "latency, checkpoints every 1.0 s (run 1/3)",
        "latency, checkpoints every 5.0 s (run 1/3)",
        "latency, checkpoints every 0.2 s (run 2/3)",
    ]
    rows = [LatencyRow(1.0, 2000, 20000, 600.0, p99, 2000.0) for p99 in (1900.0, 1100.0, 1200.0)]
    rows.insert(1, LatencyRow(0.2, 2000, 20000, 300.0, 700.0, 800.0))
    med = latency_medians(rows)
    assert [(r.interval_s, r.p99_ms, r.p99_runs) for r in med] == [
        (0.2, 700.0, (700.0,)),
        (1.0, 1200.0, (1900.0, 1100.0, 1200.0)),
    ]
    lines = target_lines(Results(latency=med))
    assert any("(1 s) | 1.20x (1200 ms) | met |" in line for line in lines)


def test_curve_selects_the_points_of_one_curve() -> None:
    env = Env("127.0.0.1:1", 4, Path("/nonexistent"), 60.0)
    rss = [p.what for p in points(env, FULL, Results(), ("rss",))]
    assert len(rss) == len(FULL.outputs) and all(w.startswith("peak RSS") for w in rss)
    both = points(env, FULL, Results(), ("latency", "rss"))
    assert len(both) == len(rss) + 1 + FULL.latency_runs * len(FULL.intervals)  # 1: warm-up


def test_a_regeneration_keeps_the_hand_written_sections_of_separate_runs() -> None:
    previous = "\n".join([
        "# kstream scaling curves", "", "## w2 throughput vs keys", "| old row |", "",
        "## The state curves on their own, with the 10 M-key points (03:08 UTC)", "",
        "| 10,000,000 | 66.0 |", "",
        "## Targets (issue 19)", "| old verdict |", "",
    ])  # fmt: skip
    assert kept_sections(previous, scaling.KEPT_SECTIONS) == [
        "## The state curves on their own, with the 10 M-key points (03:08 UTC)",
        "",
        "| 10,000,000 | 66.0 |",
    ]


def test_the_warm_up_runs_the_latency_job_and_reports_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[float, int, float]] = []

    def latency(_env: Env, interval: float, rate: int, seconds: float) -> LatencyRow:
        calls.append((interval, rate, seconds))
        return LatencyRow(interval, rate, int(rate * seconds), 100.0, 900.0, 950.0)

    monkeypatch.setattr(scaling, "latency", latency)
    env = Env("127.0.0.1:1", 4, Path("/nonexistent"), 60.0, say=lambda _text: None)
    res = Results()
    warm_up = points(env, FULL, res, ("latency",))[0]
    warm_up.run()
    assert calls == [(0.2, FULL.latency_rate, FULL.latency_warmup_s)]
    assert res.latency == [] and res.failures == []
