"""docs/first-job.md, run as written against a real broker.

The page's blocks run in order in one empty directory: ``<!-- file: NAME -->`` blocks
are written to NAME, ``<!-- run: broker -->`` blocks run with ``bash -euo pipefail``
(``KSTREAM_BOOTSTRAP`` names the test's broker, so the page's `kstream dev kafka start`
is the one step not run), and an ``<!-- output: any order -->`` or ``<!-- output:
prefix -->`` block is compared with the standard output of the run block before it.
Workers the page starts in the background are killed at the end if still running.

What it proves beyond the page's own checks: the kill -9 of a worker is reported as
the restore cause ``worker_lost``, naming the killed process by its host and pid.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from integration.e2e.harness import REPO
from tests.test_first_job_doc import PAGE, Step, steps

BIN = Path(sys.executable).parent  # the venv's `kstream` and `python`


def _check(step: Step, stdout: str) -> None:
    got = stdout.splitlines()
    want = step.code.splitlines()
    if step.kind == "output: any order":
        assert sorted(got) == sorted(want), f"{step}: got\n{stdout}"
    else:
        assert len(got) >= len(want), f"{step}: got\n{stdout}"
        for g, w in zip(got, want, strict=False):
            assert g.startswith(w), f"{step}: {g!r} does not start with {w!r}"


def test_the_first_job_page_runs_as_written(kafka_bootstrap: str, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "KSTREAM_BOOTSTRAP": kafka_bootstrap,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(REPO),
    }
    env.pop("KSTREAM_APP_ID", None)
    last: str | None = None
    ran = 0
    try:
        for step in steps(PAGE):
            if step.kind.startswith("file: "):
                (tmp_path / step.kind.removeprefix("file: ")).write_text(step.code + "\n")
            elif step.kind == "run: broker":
                out = subprocess.run(
                    ["bash", "-euo", "pipefail", "-c", step.code],
                    cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
                )  # fmt: skip
                logs = "".join(
                    f"\n--- {p.name}\n{p.read_text()[-3000:]}" for p in tmp_path.glob("*.log")
                )
                assert out.returncode == 0, f"{step}: {out.stderr[-3000:]}{logs}"
                last, ran = out.stdout, ran + 1
            elif step.kind.startswith("output: "):
                assert last is not None, f"{step}: no run block before it"
                _check(step, last)
        assert ran >= 12
        # The kill -9 named by its cause and by the killed process (host:pid).
        killed = int((tmp_path / "worker-2.pid").read_text())
        status = subprocess.run(
            [BIN / "kstream", "status", "--app-id", "clicks", "--json"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        doc = json.loads(status.stdout)
        assert doc["phase"] == "stopped"
        lost = [e for e in doc["events"] if e["cause"] == "worker_lost"]
        assert len(lost) == 1, doc["events"]
        assert f"worker {socket.gethostname()}:{killed}-" in lost[0]["reason"]
        assert not [e for e in doc["events"] if e["kind"] == "task_failed"], doc["events"]
    finally:
        for pid_file in tmp_path.glob("*.pid"):
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
