"""Input that keeps flowing while a test stops and starts its job (savepoints, upgrades,
rescaling), the runs of such a job (``kstream run``, stopped with a savepoint), and waits
on a ``kstream run`` process: its log, its first committed output."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from integration.cli_job import CLI
from integration.e2e.harness import REPO
from integration.edge_tools import read_all
from kstream.kafka.clients import make_producer

Line = Callable[[int], tuple[int, str]]  # record i -> (partition, value)


class SteadyFeed:
    """Writes ``line(0)``, ``line(1)``, ... to ``topic`` from a thread, ``per_tick``
    records every 0.1 s (40: ~400 records/s), from entering the ``with`` block until
    leaving it; then ``produced`` is how many records were written (all flushed)."""

    def __init__(self, bootstrap: str, topic: str, line: Line, per_tick: int = 40) -> None:
        self.bootstrap, self.topic, self.line, self.per_tick = bootstrap, topic, line, per_tick
        self.produced = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        p = make_producer(self.bootstrap)
        while not self._stop.is_set():
            for _ in range(self.per_tick):
                part, value = self.line(self.produced)
                p.produce(self.topic, value.encode(), partition=part)
                self.produced += 1
            p.flush(30)
            time.sleep(0.1)  # the feed's pace, not a wait for anything
        p.flush(30)

    def __enter__(self) -> SteadyFeed:
        self._thread.start()
        return self

    def __exit__(
        self, _t: type[BaseException] | None, _e: BaseException | None, _tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join(30)


def wait_for_line(proc: subprocess.Popen[bytes], log: Path, text: str, timeout: float) -> None:
    """Until ``text`` is in ``log``; fails if ``proc`` ends first or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while text not in log.read_text():
        assert proc.poll() is None, log.read_text()[-4000:]
        assert time.monotonic() < deadline, f"no {text!r} in {timeout:g}s"
        time.sleep(0.2)


def wait_for_output(
    bootstrap: str, topic: str, proc: subprocess.Popen[bytes], log: Path, timeout: float
) -> None:
    """Until ``topic`` holds committed output; fails if ``proc`` ends first or ``timeout``
    passes."""
    deadline = time.monotonic() + timeout
    while not read_all(bootstrap, topic):
        assert proc.poll() is None, log.read_text()[-4000:]
        assert time.monotonic() < deadline, f"no output committed to {topic} in {timeout:g}s"
        time.sleep(0.5)


class SavepointRuns:
    """The runs of one job: run ``n`` is ``kstream run`` of ``tmp/r{n}.py`` under app id
    ``apps[n]`` (its own state directory, log ``tmp/r{n}.log``), on the test's broker and
    ``store_url``, checkpointing every second; each is stopped by ``kstream savepoint
    --stop`` and the next starts from that savepoint (the test passes
    ``--from-savepoint``)."""

    def __init__(self, tmp: Path, bootstrap: str, store_url: str, apps: list[str]) -> None:
        self.tmp, self.bootstrap, self.store_url, self.apps = tmp, bootstrap, store_url, apps

    def start(self, run: int, *extra: str) -> tuple[subprocess.Popen[bytes], Path]:
        """Run ``run`` started (not waited for), with ``extra`` options; its log."""
        log = self.tmp / f"r{run}.log"
        proc = subprocess.Popen(
            [*CLI, "-v", "run", str(self.tmp / f"r{run}.py"), "--bootstrap", self.bootstrap,
             "--store", self.store_url, "--interval", "1", "--state-dir",
             str(self.tmp / f"state{run}"), "--app-id", self.apps[run], *extra],
            stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=REPO,
        )  # fmt: skip
        return proc, log

    def savepoint_stop(self, run: int, proc: subprocess.Popen[bytes], log: Path) -> str:
        """``kstream savepoint --stop`` of run ``run``: its savepoint's path, once the run
        ended with 0."""
        sp = subprocess.run(
            [*CLI, "savepoint", "--app-id", self.apps[run], "--bootstrap", self.bootstrap,
             "--store", self.store_url, "--name", f"sp{run}", "--stop", "--timeout", "90"],
            capture_output=True, cwd=REPO, timeout=120,
        )  # fmt: skip
        assert sp.returncode == 0, (
            sp.stderr.decode()[-4000:] + "\n--- the job's log ---\n" + log.read_text()[-8000:]
        )
        assert proc.wait(timeout=60) == 0, log.read_text()[-4000:]
        return sp.stdout.decode().strip()
