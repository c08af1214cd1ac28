"""A worker raises its open-files soft limit to the hard one before opening any task
(``kstream.hosting.tuning.raise_open_files_limit``): at 256 tasks it holds over a
thousand descriptors, past the usual soft limit of 1 024."""

from __future__ import annotations

import importlib
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kstream.cli.main import main

ASK = (
    "import resource; from kstream.hosting.tuning import raise_open_files_limit;"
    "before, now = raise_open_files_limit();"
    "print(before, now, resource.getrlimit(resource.RLIMIT_NOFILE)[0])"
)


def _run_with_soft_limit(soft: int) -> list[int]:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]

    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    out = subprocess.run(
        [sys.executable, "-c", ASK], preexec_fn=lower, capture_output=True, text=True, check=True
    ).stdout
    return [int(v) for v in out.split()]


def _ceiling() -> int:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return hard if hard != resource.RLIM_INFINITY else 1 << 20


def test_a_low_soft_limit_is_raised_to_the_hard_one() -> None:
    if _ceiling() <= 256:
        pytest.fail("this machine's hard open-files limit is at most 256: cannot test")
    assert _run_with_soft_limit(256) == [256, _ceiling(), _ceiling()]


def test_a_soft_limit_at_the_hard_one_is_left_alone() -> None:
    assert _run_with_soft_limit(_ceiling()) == [_ceiling()] * 3


class _Raised(Exception):
    pass


@pytest.mark.parametrize("command", ["worker", "run"])
def test_the_worker_commands_raise_it_before_the_job_is_prepared(
    command: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    module = importlib.import_module(f"kstream.cli.{command}")
    calls: list[str] = []

    def raised() -> tuple[int, int]:
        calls.append("limit")
        raise _Raised

    def prepared(*args: object, **kwargs: object) -> None:
        calls.append("prepare")

    monkeypatch.setattr(module, "raise_open_files_limit", raised)
    monkeypatch.setattr(module, "prepare_job", prepared)
    topology = tmp_path / "job.py"
    topology.write_text("raise AssertionError('the job was loaded')\n")
    result = CliRunner().invoke(main, [command, str(topology)])
    assert isinstance(result.exception, _Raised), result.output
    assert calls == ["limit"]
