"""benchmarks.catchup's job and report (no broker)."""

from __future__ import annotations

from benchmarks.catchup import Run, job_text, summary


def test_the_summary_gives_each_trees_medians_over_its_runs_in_the_order_run() -> None:
    runs = [
        Run("/tmp/before", 50.0, [23000.0, 22000.0]),
        Run("/work/main", 55.0, [15000.0, 1000.0, 2000.0]),
        Run("/work/main", 53.0, [900.0, 1100.0, 1600.0, 4000.0]),
        Run("/tmp/before", 48.0, [21000.0]),
    ]
    assert summary(runs) == [
        "/tmp/before: checkpoint median 21750 ms, largest 22000 ms, 1.5 checkpoints, "
        "49.0 s (2 runs)",
        "/work/main: checkpoint median 1675 ms, largest 9500 ms, 3.5 checkpoints, 54.0 s (2 runs)",
    ]
    assert runs[1].line() == (
        "/work/main: 55.0 s, 3 checkpoints, median 2000 ms, largest 15000 ms (15000, 1000, 2000)"
    )
    assert summary([Run("/tmp/x", 9.0, [])]) == ["/tmp/x: no checkpoint completed"]


def test_the_costly_map_goes_before_or_behind_the_key_by() -> None:
    for slow in ("before", "behind"):
        text = job_text("in", "out", 0.5, slow)
        namespace: dict[str, object] = {}
        exec(compile(text, "job.py", "exec"), namespace)  # builds the topology
        lines = [line for line in text.splitlines() if line.startswith("stream")]
        where = lines.index("stream = stream.map(costly)")
        keyed = next(i for i, line in enumerate(lines) if "key_by" in line)
        assert (where < keyed) == (slow == "before")
        assert "0.0005" in text
