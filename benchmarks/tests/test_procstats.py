"""Child-process measurement (spawns small Python children; no broker)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from benchmarks.procstats import Child

REPO = Path(__file__).resolve().parents[2]


def test_exit_code_stdout_cpu_and_peak_rss_of_the_child(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "block = b'x' * (120 * 1024 * 1024)\n"  # written, so resident
        "n = sum(range(2_000_000))\n"
        "print('done', n)\n"
        "sys.exit(3)\n"
    )
    child = Child([sys.executable, "-c", code], cwd=REPO, log_dir=tmp_path, name="c")
    res = child.wait(60)
    assert res.returncode == 3
    assert res.stdout == f"done {sum(range(2_000_000))}\n"
    assert res.peak_rss_mb >= 120
    assert 0 < res.cpu_s < 30
    assert res.wall_s > 0


def test_timeout_kills_the_child_and_says_so(tmp_path: Path) -> None:
    code = "import sys, time\nprint('started', file=sys.stderr, flush=True)\ntime.sleep(120)\n"
    child = Child([sys.executable, "-c", code], cwd=REPO, log_dir=tmp_path, name="slow")
    with pytest.raises(TimeoutError, match="did not finish within 1s"):
        child.wait(1)
    assert not child.running
    assert child.result().returncode == -9


def test_stop_terminates_a_running_child(tmp_path: Path) -> None:
    code = "import time\ntime.sleep(120)\n"
    child = Child([sys.executable, "-c", code], cwd=REPO, log_dir=tmp_path, name="idle")
    assert child.running
    res = child.stop(grace=10)
    assert res.returncode == -15  # SIGTERM was enough


def test_peak_rss_is_the_childs_own_not_the_parents(tmp_path: Path) -> None:
    # Linux starts a forked child's ru_maxrss at the parent's peak; the spawn helper
    # keeps the harness's memory out of the contender's figure.
    ballast = b"x" * (400 * 1024 * 1024)
    child = Child([sys.executable, "-c", "pass"], cwd=REPO, log_dir=tmp_path, name="tiny")
    res = child.wait(60)
    assert len(ballast) > 0
    assert res.returncode == 0
    assert res.peak_rss_mb < 100
