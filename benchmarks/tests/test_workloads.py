"""Workload definitions and the contender/harness report protocol (no broker)."""

from __future__ import annotations

import pytest

from benchmarks.workloads import EndOffsets, Progress, Report, keep, transform


def test_keep_selects_clicks_and_purchases_of_at_least_one() -> None:
    assert keep({"kind": "click", "amount": 1.0})
    assert keep({"kind": "purchase", "amount": 99.99})
    assert not keep({"kind": "click", "amount": 0.99})
    assert not keep({"kind": "view", "amount": 50.0})
    assert not keep({"kind": "signup", "amount": 50.0})


def test_transform_rounds_to_integer_cents_and_keeps_other_fields() -> None:
    # 0.29 * 100 == 28.999999999999996 in binary floating point: rounding, not truncation.
    event = {"user": "u7", "kind": "click", "amount": 0.29, "ts": 5}
    assert transform(event) == {"user": "u7", "kind": "click", "cents": 29, "ts": 5}


def test_end_offsets_json_round_trip() -> None:
    ends = EndOffsets({0: 10, 3: 0, 1: 7})
    assert EndOffsets.from_json(ends.to_json()) == ends
    assert ends.to_json() == '{"0": 10, "1": 7, "3": 0}'


def test_progress_is_done_when_every_nonempty_partition_reached_its_end() -> None:
    progress = Progress(EndOffsets({0: 3, 1: 0, 2: 2}))
    assert progress.total == 5
    assert not progress.done
    assert progress.observe(0, 1) is False
    assert progress.observe(2, 1) is False  # partition 2 done; 0 still has offset 2 to go
    assert progress.t_first is not None
    assert progress.observe(0, 2) is True
    assert progress.done


def test_progress_of_all_empty_input_is_done_at_once() -> None:
    assert Progress(EndOffsets({0: 0, 1: 0})).done


def test_report_is_parsed_from_the_last_report_line(capsys: pytest.CaptureFixture[str]) -> None:
    Report("old", 1, 1, 1.0, 2.0).emit()
    print("some log line")
    Report("raw_pipe", 20_000, 19_999, 10.5, 12.25).emit()
    print("trailing output")
    assert Report.parse(capsys.readouterr().out) == Report("raw_pipe", 20_000, 19_999, 10.5, 12.25)


def test_missing_report_is_an_error() -> None:
    with pytest.raises(ValueError, match="no report line"):
        Report.parse("Traceback ...\nboom\n")
