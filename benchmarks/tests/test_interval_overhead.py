"""The interval driver's arithmetic and its contenders (no broker)."""

from __future__ import annotations

import pytest

from benchmarks.interval_overhead import OFF, contenders, summarize, table, w4_workload


def test_overheads_are_against_off_both_of_the_medians_and_round_by_round() -> None:
    rates = {"1 s": [80.0, 90.0, 120.0], OFF: [100.0, 100.0, 150.0]}
    cpu = {"1 s": [9.0, 10.0, 11.0], OFF: [7.0, 8.0, 9.0]}
    one, off = summarize(rates, cpu)
    assert (one.median, one.low, one.high, one.cpu_s) == (90.0, 80.0, 120.0, 10.0)
    assert one.overhead == pytest.approx(0.1)  # 1 - 90 / 100
    assert one.paired == pytest.approx(0.2)  # the median of 20 %, 10 %, 20 %
    assert (off.overhead, off.paired) == (0.0, 0.0)
    text = table([one, off])
    assert "| 1 s | 0.1 k (0.1-0.1) | 10.0% | 20.0% | 10.00 |" in text
    assert "| off | 0.1 k (0.1-0.1) | - | - | 8.00 |" in text


def test_the_checkpointed_contender_runs_at_each_interval_and_off_is_w4s_own() -> None:
    runs = contenders(w4_workload(), [1, 5])
    assert list(runs) == ["1 s", "5 s", OFF]
    for name, s in (("1 s", "1"), ("5 s", "5")):
        args = runs[name].args
        assert args[args.index("--commit-interval") + 1] == s
        assert args[args.index("--checkpointing") + 1] == "on"
        assert args[args.index("--guarantee") + 1] == "exactly-once"
    assert runs[OFF].args[runs[OFF].args.index("--checkpointing") + 1] == "off"
    assert runs["5 s"].name == "kstream_ckpt_5s"
