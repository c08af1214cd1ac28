"""Run a contender as a separate OS process and measure what it cost.

CPU seconds and peak RSS come from ``os.wait4``'s rusage, taken by the small
``benchmarks.spawn`` process that starts the contender (see there why): on Linux that
covers the contender and every descendant it waited for (ru_maxrss is the largest).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ChildResult:
    """Exit status and resource use of one finished child process."""

    returncode: int
    cpu_s: float  # user + system
    peak_rss_mb: float
    wall_s: float  # from spawn to exit
    stdout: str
    stderr_tail: str


class Child:
    """A child process in its own session (so it and its descendants can be killed as one)."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,  # must let ``python -m benchmarks.spawn`` import (the repository root)
        log_dir: Path,
        name: str,
        env: Mapping[str, str] | None = None,
    ) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        self.stdout_path = log_dir / f"{name}.out"
        self.stderr_path = log_dir / f"{name}.err"
        self.rusage_path = log_dir / f"{name}.rusage.json"
        self.rusage_path.unlink(missing_ok=True)
        spawn = [sys.executable, "-m", "benchmarks.spawn", str(self.rusage_path), "--"]
        self._t0 = time.monotonic()
        with self.stdout_path.open("wb") as out, self.stderr_path.open("wb") as err:
            self._proc = subprocess.Popen(
                [*spawn, *argv],
                cwd=cwd,
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
                env=dict(env) if env is not None else None,
                start_new_session=True,
            )
        self.pid = self._proc.pid
        self._status: tuple[int, resource.struct_rusage] | None = None
        self._reaper = threading.Thread(target=self._reap, daemon=True)
        self._reaper.start()

    def _reap(self) -> None:
        _, status, usage = os.wait4(self.pid, 0)
        self._proc.returncode = os.waitstatus_to_exitcode(status)  # Popen must not reap again
        self._wall = time.monotonic() - self._t0
        self._status = (self._proc.returncode, usage)

    @property
    def running(self) -> bool:
        return self._status is None

    def kill(self, sig: signal.Signals = signal.SIGKILL) -> None:
        """Send ``sig`` to the child's whole process group (no-op once it exited)."""
        if self._status is None:
            with contextlib.suppress(ProcessLookupError):  # exited between check and signal
                os.killpg(self.pid, sig)

    def wait(self, timeout: float) -> ChildResult:
        """Wait up to ``timeout`` s for the exit; on timeout kill the group and raise TimeoutError."""
        self._reaper.join(timeout)
        if self._status is None:
            self.kill(signal.SIGKILL)
            self._reaper.join(30)
            raise TimeoutError(
                f"{self._proc.args!r} did not finish within {timeout:.0f}s; killed. "
                f"stderr tail:\n{self._tail()}"
            )
        return self.result()

    def stop(self, grace: float = 20.0) -> ChildResult:
        """SIGTERM the group, wait ``grace`` s, then SIGKILL; return the result."""
        self.kill(signal.SIGTERM)
        self._reaper.join(grace)
        if self._status is None:
            self.kill(signal.SIGKILL)
            self._reaper.join(30)
        return self.result()

    def result(self) -> ChildResult:
        """The finished child's result (the child must have exited)."""
        assert self._status is not None, "child still running"
        code, ru = self._status
        cpu_s, maxrss_kb = ru.ru_utime + ru.ru_stime, ru.ru_maxrss
        if self.rusage_path.exists():  # absent when the group was SIGKILLed
            own = json.loads(self.rusage_path.read_text())
            code, cpu_s, maxrss_kb = own["code"], own["cpu_s"], own["maxrss_kb"]
        return ChildResult(
            returncode=code,
            cpu_s=cpu_s,
            peak_rss_mb=maxrss_kb / 1024.0,  # Linux reports KiB
            wall_s=self._wall,
            stdout=self.stdout_path.read_text(errors="replace"),
            stderr_tail=self._tail(),
        )

    def _tail(self, lines: int = 20) -> str:
        text = self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])
