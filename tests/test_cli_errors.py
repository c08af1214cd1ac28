"""Errors a user hits at start-up are one line naming the cause, in every job command
(issue 37): a topology file that does not run printed a 34-line click/runpy traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CLI = [sys.executable, "-c", "from kstream.cli import main; main()"]
MODES = {
    "run": ["run"],
    "worker": ["worker"],
    "worker+coordinator": ["coordinator"],  # the coordinator loads it as the workers do
}


def _kstream(*args: str) -> tuple[int, str, str]:
    done = subprocess.run(
        [*CLI, *args, "--bootstrap", "127.0.0.1:1"], capture_output=True, text=True, timeout=60
    )
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize("mode", sorted(MODES))
def test_a_topology_with_a_syntax_error(tmp_path: Path, mode: str) -> None:
    topology = tmp_path / "bad.py"
    topology.write_text("from kstream.api import Topology\n\ntopology = Topology('x'\n")
    code, out, err = _kstream(*MODES[mode], str(topology))
    assert (code, out) == (2, "")
    assert (
        err
        == f"kstream: {topology} is not valid Python: '(' was never closed ({topology}, line 3)\n"
    )


@pytest.mark.parametrize("mode", sorted(MODES))
def test_a_topology_that_raises_at_import(tmp_path: Path, mode: str) -> None:
    topology = tmp_path / "raises.py"
    topology.write_text("import os\n\nSIZE = int(os.environ.get('NOPE_NOT_SET', 'ten'))\n")
    code, out, err = _kstream(*MODES[mode], str(topology))
    assert (code, out) == (2, "")
    assert err == (
        f"kstream: {topology} raised ValueError: invalid literal for int() with base 10: "
        f"'ten' ({topology}, line 3)\n"
    )
