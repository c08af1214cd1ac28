"""The crash test has teeth: run against two broken exactly-once sinks, it sees the
duplicates of a sink that ignores its commit marker and the losses of a sink that
forgets its buffer (``integration/e2e/teeth.py``; also runnable by hand)."""

from __future__ import annotations

from pathlib import Path

import pytest

from integration.e2e.teeth import MUTANTS, check

pytestmark = pytest.mark.integration

SEED = 440776


def test_the_crash_test_catches_every_broken_sink(
    kafka_bootstrap: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    verdicts = check(kafka_bootstrap, SEED, tmp_path)
    with capsys.disabled():
        for v in verdicts:
            print(
                f"\n[teeth] {v.mutant}: {v.comparison} -> {'caught' if v.caught else 'UNNOTICED'}"
            )
    assert [v.mutant for v in verdicts] == list(MUTANTS)
    assert [v.mutant for v in verdicts if not v.caught] == []
