"""Results table, ratios against the targets, recovery set-up (no broker)."""

from __future__ import annotations

import os

import pytest

from benchmarks.generate import InputSpec, partition_of
from benchmarks.harness import FED_LINE, RunResult, Series
from benchmarks.lineup import Contender, Workload
from benchmarks.machine import cpu_steal_s, steal_line
from benchmarks.recovery import RECOVERY_WINDOW_MS, RecoveryResult, probe_key, window_bounds
from benchmarks.report import (
    RunInfo,
    commit_wait_lines,
    kept_sections,
    ratio,
    ratio_lines,
    recovery_lines,
    results_text,
    table,
)


def _series(wl: str, name: str, rates: list[float], module: str = "m") -> Series:
    w = Workload(wl, wl, "json", (), True)
    s = Series(w, Contender(name, module))
    s.runs = [RunResult(r, 1.0, 2.0, 100.0, 10, 5, True) for r in rates]
    return s


def test_ratio_uses_medians_of_valid_runs_only() -> None:
    k = _series("w1", "kstream", [100.0, 300.0, 200.0])
    k.runs.append(RunResult(10_000.0, 1.0, 1.0, 1.0, 10, 0, False, "bad output"))
    q = _series("w1", "quix", [50.0, 100.0, 150.0])
    assert ratio([k, q], "w1", "kstream", "quix") == (2.0, "")


def test_ratio_names_what_is_missing() -> None:
    k = Series(Workload("w1", "w1", "json", (), True), Contender("kstream", "kstream_x"))
    k.unavailable = "not built"
    q = _series("w1", "quix", [1.0])
    assert ratio([k, q], "w1", "kstream", "quix") == (None, "kstream: not available")
    assert ratio([q], "w2", "kstream", "quix") == (None, "kstream not run in w2")


def test_targets_report_losses_and_wins() -> None:
    series = [
        _series("w1", "kstream", [150.0]),
        _series("w1", "quix", [100.0]),
        _series("w1", "raw_pipe", [200.0]),
        _series("w2", "kstream", [300.0]),
        _series("w2", "kafka_streams", [200.0]),
        _series("w4", "kstream_ckpt_1s", [96.0]),
        _series("w4", "kstream_ckpt_off", [100.0]),
    ]
    rec: dict[str, list[RecoveryResult] | str] = {
        "kstream": [RecoveryResult(1, 1.0, 5, 5, 1, 1)],
        "quix": [RecoveryResult(1, 10.0, 5, 5, 1, 1)],
        "kafka_streams": [RecoveryResult(1, 0.5, 5, 5, 1, 1)],
    }
    lines = ratio_lines(series, rec)
    assert "| w2 exactly-once: kstream >= 1.0x Kafka Streams exactly-once | 1.50x | met |" in lines
    assert "| w1: kstream >= 3x Quix Streams | 1.50x | MISSED |" in lines
    assert "| w1: kstream >= 0.8x the callback-free raw pipe | 0.75x | MISSED |" in lines
    assert "| w4: checkpoint overhead at a 1 s interval <= 5 % | 4.0 % | met |" in lines
    assert (
        "| recovery, local state wiped: kstream <= 0.1x Quix Streams | 0.10x (1.0 s vs 10.0 s) | met |"
        in lines
    )
    assert (
        "| recovery, local state wiped: kstream <= 1.0x Kafka Streams | 2.00x (1.0 s vs 0.5 s) | MISSED |"
        in lines
    )
    assert not any("local state kept" in line for line in lines)  # the kept mode was not run
    assert "| w2: kstream >= 2x Quix Streams | n/a (quix not run in w2) | not measured |" in lines
    assert "- w1: kstream / raw_pipe" not in lines  # a target, not an informational ratio
    assert "- w3: kstream / kafka_streams = n/a (kstream not run in w3)" in lines


def test_table_lists_unavailable_contenders_with_the_reason() -> None:
    s = Series(Workload("w2", "w2", "json", (), False), Contender("kstream", "kstream_w"))
    s.unavailable = "not built yet"
    ok = _series("w2", "quix", [1000.0, 3000.0, 2000.0], module="quix_w")
    rows = table([s, ok])
    assert (
        rows[2] == "| w2 | kstream (`kstream_w`) | - | not available: not built yet | | | | | | |"
    )
    assert (
        rows[3]
        == "| w2 | quix (`quix_w`) | 3/3 | 2,000 | 1,000 - 3,000 | 1.00 | 2.00 | - | 100 | 5 |"
    )


def test_table_shows_the_median_cpu_steal_of_the_valid_runs() -> None:
    s = _series("w4", "kstream", [1000.0, 3000.0, 2000.0, 9000.0])
    for r, steal in zip(s.runs, [0.5, 4.0, 1.5, None], strict=True):
        r.steal_s = steal
    s.runs[1].valid = False  # its steal is not the valid runs'
    assert table([s])[2].split(" | ")[7] == "1.00"  # median of 0.5 and 1.5


def test_recovery_state_fits_one_window_and_probes_hit_their_partition() -> None:
    spec = InputSpec(1_000_000, 1_000_000, 4, event_rate=5_000, cover=True)
    start, end = window_bounds(spec)
    assert end - start == RECOVERY_WINDOW_MS
    assert start <= 1_700_000_000_000 and 1_700_000_000_000 + spec.event_span_ms < end
    with pytest.raises(ValueError, match="do not fit"):
        window_bounds(InputSpec(100_000, 10, 4, event_rate=10, cover=True))
    for p in range(4):
        assert partition_of(probe_key(p, 4), 4) == p


def test_recovery_target_says_why_it_was_not_measured() -> None:
    assert (
        "| recovery, local state wiped: kstream <= 0.1x Quix Streams | n/a (kstream: not run; quix: not run) "
        "| not measured |" in ratio_lines([], {})
    )
    rec: dict[str, list[RecoveryResult] | str] = {
        "kstream": "not available: x",
        "quix": [],
        "kafka_streams": [RecoveryResult(1, 3.0, 5, 5, 1, 1)],
    }
    lines = ratio_lines([], rec)
    assert (
        "| recovery, local state wiped: kstream <= 0.1x Quix Streams | n/a (kstream: not available: x; "
        "quix: no valid run) | not measured |" in lines
    )
    assert (
        "| recovery, local state wiped: kstream <= 1.0x Kafka Streams | n/a (kstream: not available: x) "
        "| not measured |" in lines
    )


def test_recovery_with_local_state_kept_is_compared_like_with_like() -> None:
    rec: dict[str, list[RecoveryResult] | str] = {
        "kstream": [RecoveryResult(1, 3.0, 5, 5, 1, 1)],
        "quix": [RecoveryResult(1, 10.0, 5, 5, 1, 1)],
        "kstream (local state kept)": [
            RecoveryResult(1, 2.0, 5, 5, 1, 1),
            RecoveryResult(1, 1.0, 5, 5, 1, 1),
            RecoveryResult(1, 9.0, 5, 5, 1, 1),
        ],
        "quix (local state kept)": [RecoveryResult(1, 4.0, 5, 5, 1, 1)],
        "kafka_streams (local state kept)": [RecoveryResult(1, 8.0, 5, 5, 1, 1)],
    }
    lines = ratio_lines([], rec)
    assert (
        "| recovery, local state wiped: kstream <= 0.1x Quix Streams | 0.30x (3.0 s vs 10.0 s) | MISSED |"
        in (lines)
    )
    assert (
        "| extra: recovery with local state kept: kstream <= 0.2x Quix Streams | 0.50x (2.0 s vs 4.0 s) | MISSED |"
        in (lines)
    )
    assert (
        "| extra: recovery with local state kept: kstream <= 1.0x Kafka Streams | 0.25x (2.0 s vs 8.0 s) | met |"
        in (lines)
    )
    table = recovery_lines(rec, 5)
    assert (
        table[6]
        == "| kstream (local state kept) | 3 | 2.00 | 1.00 - 9.00 | 1.0 | 5/5, 5/5, 5/5 | 1.00 | 1 |"
    )


def test_kstream_commit_wait_is_parsed_and_tabulated() -> None:
    line = "kstream_stateless: all input fed after 4.259 s, output committed after 5.304 s"
    m = FED_LINE.search("noise\n" + line + "\n")
    assert m is not None and (m.group(1), m.group(2)) == ("4.259", "5.304")
    k = _series("w1", "kstream", [100.0, 200.0, 300.0])
    for r, fed, total in zip(k.runs, (4.0, 5.0, 9.0), (5.0, 6.0, 10.0), strict=True):
        r.fed_s, r.seconds = fed, total
    q = _series("w1", "quix", [1.0])  # reports no split: no row
    assert commit_wait_lines([k, q])[2:] == ["| w1 | kstream | 5.00 | 6.00 |"]
    assert commit_wait_lines([q]) == []


def test_a_regeneration_keeps_the_checkpoint_store_section_and_nothing_else() -> None:
    previous = (
        "# kstream benchmark results\n\n## Throughput\n\nold table\n\n"
        "## Checkpoint store: file:// vs s3:// (workload 4's recovery job)\n\n"
        "| store | runs |\n|---|---|\n| file:// | 1 |\n\n"
        "## Notes on this run (written by hand after it)\n\n- stale\n"
    )
    kept = kept_sections(previous)
    assert kept == [
        "## Checkpoint store: file:// vs s3:// (workload 4's recovery job)",
        "",
        "| store | runs |",
        "|---|---|",
        "| file:// | 1 |",
    ]
    info = RunInfo("2026-12-01 05:00 UTC", "python -m benchmarks.run", [], "broker", 4,
                   1000, 10, 5000, 60000, 100, False, 1.0)  # fmt: skip
    text = results_text(info, [], [], {}, previous)
    assert text.endswith("| file:// | 1 |\n") and "old table" not in text and "stale" not in text
    assert text.count("## Checkpoint store:") == 1
    assert "## Checkpoint store:" not in results_text(info, [], [], {})


def test_the_steal_line_gives_the_share_of_the_machines_cpu_time() -> None:
    line = steal_line(30.0, 300.0)
    cpus = os.cpu_count() or 1
    assert line.endswith(f"30.0 of {300 * cpus} CPU-seconds ({10 / cpus:.1f} %)")
    steal = cpu_steal_s()
    assert steal is None or steal >= 0
