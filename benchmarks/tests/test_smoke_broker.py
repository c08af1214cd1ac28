"""The whole command end to end on a tiny input, against a real broker.

Runs only when ``KSTREAM_TEST_BOOTSTRAP`` names one (e.g. the dev broker); the Quix
rows need ``benchmarks/.venv-quix`` (created by ``python -m benchmarks.run``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from benchmarks.run import QUIX_PYTHON, main

pytestmark = pytest.mark.integration

BOOTSTRAP = os.environ.get("KSTREAM_TEST_BOOTSTRAP")


@pytest.mark.skipif(not BOOTSTRAP, reason="needs KSTREAM_TEST_BOOTSTRAP (a real Kafka broker)")
def test_stateless_and_recovery_rows_are_measured_and_verified(tmp_path: Path) -> None:
    results = tmp_path / "RESULTS.md"
    args = [
        "--bootstrap", str(BOOTSTRAP), "--records", "2000", "--keys", "500", "--runs", "1",
        "--recovery-keys", "2000", "--timeout", "180", "--results", str(results),
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
        assert f"| {wl} | kstream (`kstream_stateless`) |" in text
        if QUIX_PYTHON.exists():
            assert f"| {wl} | quix (`quix_stateless`) | 1/1 |" in text
    if QUIX_PYTHON.exists():
        assert "| quix | 1 |" in text and "| 2000/2000 |" in text
