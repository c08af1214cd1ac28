"""The whole command end to end on a tiny input, against a real broker.

Needs ``KSTREAM_TEST_BOOTSTRAP`` to name one (e.g. the dev broker): without it the tests
are skipped, or fail under ``CI=true`` (``integration.ci.unavailable``). The Quix rows
need ``benchmarks/.venv-quix`` (created by ``python -m benchmarks.run``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from benchmarks.generate import InputSpec, events
from benchmarks.lineup import QUIX_PYTHON
from benchmarks.run import main
from integration.ci import unavailable

pytestmark = pytest.mark.integration


@pytest.fixture
def bootstrap() -> str:
    """The broker named by ``KSTREAM_TEST_BOOTSTRAP``."""
    named = os.environ.get("KSTREAM_TEST_BOOTSTRAP")
    if not named:
        unavailable(
            "no Kafka broker for the benchmark smoke test", "KSTREAM_TEST_BOOTSTRAP is not set"
        )
    return named


def test_stateless_and_recovery_rows_are_measured_and_verified(
    tmp_path: Path, bootstrap: str
) -> None:
    results = tmp_path / "RESULTS.md"
    args = [
        "--bootstrap", bootstrap, "--records", "2000", "--keys", "500", "--runs", "1",
        "--recovery-keys", "2000", "--recovery-local", "both", "--timeout", "180",
        "--results", str(results),
        "--no-quix-install", "--workload", "w1", "--workload", "w5", "--workload", "recovery",
    ]  # fmt: skip
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 0, out.output
    text = results.read_text()
    assert "--records 2000" in text  # the exact command is recorded
    for wl in ("w1", "w5"):
        # 1/1: the run's output matched the expected count and cents sum exactly
        assert f"| {wl} | raw_pipe (`raw_pipe`) | 1/1 |" in text
        assert f"| {wl} | raw_stateless (`raw_stateless`) | 1/1 |" in text
        assert f"| {wl} | kstream (`kstream_stateless`) | 1/1 |" in text
        if QUIX_PYTHON.exists():
            assert f"| {wl} | quix (`quix_stateless`) | 1/1 |" in text
    # Kafka Streams' output is checked exactly like the others; the ceilings ran
    assert "| w1 | kafka_streams (`kafkastreams`) | 1/1 |" in text
    assert "| w1 | broker_producer_perf (`broker_perf`) | 1/1 |" in text
    assert "| w1 | broker_consumer_perf (`broker_perf`) | 1/1 |" in text
    # kstream and Kafka Streams recover their whole state, wiped or kept
    for name in ("kstream", "kafka_streams"):
        assert f"| {name} | 1 |" in text and f"| {name} (local state kept) | 1 |" in text
    assert text.count("| 2000/2000 |") == (6 if QUIX_PYTHON.exists() else 4)


def test_window_count_rows_agree_between_contenders(tmp_path: Path, bootstrap: str) -> None:
    """kstream and Quix close the same windows: the same number of results per workload."""
    results = tmp_path / "RESULTS.md"
    args = [
        "--bootstrap", bootstrap, "--records", "3000", "--keys", "50", "--runs", "1",
        "--window-ms", "100", "--timeout", "180", "--results", str(results), "--no-quix-install",
        "--workload", "w2", "--workload", "w3", "--workload", "w4",
    ]  # fmt: skip
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 0, out.output
    rows = {
        tuple(cell.strip() for cell in line.split("|")[1:3]): line.split("|")[-2].strip()
        for line in results.read_text().splitlines()
        if line.startswith("| w")
    }
    expected = str(expected_window_results(3000, 50, 100))
    for wl in ("w2", "w3"):
        assert rows[(wl, "kstream (`kstream_window_count`)")] == expected
        assert rows[(wl, "kafka_streams (`kafkastreams`)")] == expected
        if QUIX_PYTHON.exists():
            assert rows[(wl, "quix (`quix_window_count`)")] == expected
    assert rows[("w4", "kstream_ckpt_1s (`kstream_window_count`)")] == expected
    assert rows[("w4", "kstream_ckpt_off (`kstream_window_count`)")] == expected


def expected_window_results(records: int, keys: int, window_ms: int) -> int:
    """(key, window) pairs whose window closed: its partition's event time passed its end."""
    spec = InputSpec(records, keys, 4, event_rate=5_000)
    windows: set[tuple[int, bytes, int]] = set()
    latest: dict[int, int] = {}
    for p, key, _event, ts in events(spec):
        windows.add((p, key, ts - ts % window_ms))
        latest[p] = max(latest.get(p, ts), ts)
    return sum(1 for p, _, start in windows if start + window_ms <= latest[p])
