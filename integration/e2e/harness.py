"""Crash-test harness: a real job (coordinator + workers as OS processes) on a real broker.

The harness owns one job run: it renames the topology's topics to unique names,
starts ``kstream coordinator`` and ``kstream worker`` processes (logs in files),
SIGKILLs processes (also at the workers' debug pause points), observes the control
topic, waits for the job to drain and reads the sink with ``read_committed``. The
input comes from :mod:`integration.e2e.generator`.
What a run observed (its statistics, the sink compared with the expected output) is
in :mod:`integration.e2e.observation`.

Every wait is a condition with a deadline that fails with what was observed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from integration.e2e.observation import Comparison as Comparison
from integration.e2e.observation import RunReport as RunReport
from integration.e2e.observation import canonical as canonical
from integration.e2e.observation import covers as covers
from integration.e2e.observation import read_sink as read_sink
from integration.e2e.observation import report as report
from integration.e2e.observation import source_ends as source_ends
from integration.edge_tools import Read as Read
from kstream.checkpointstorage.base import CheckpointStore
from kstream.checkpointstorage.urls import open_store
from kstream.kafka.clients import (
    TopicPartition,
    TopicSpec,
    ensure_topics,
    make_admin,
    make_consumer,
)
from kstream.names import control_topic
from kstream.protocol.messages import CheckpointCompleted, Message, ProtocolError, decode

REPO = Path(__file__).resolve().parents[2]
PAUSE_MARKER = "KSTREAM-DEBUG-PAUSE"


class HarnessError(AssertionError):
    """A condition of the crash test did not hold within its deadline."""


def wait_until(
    what: str, cond: Callable[[], bool], timeout: float, observed: Callable[[], str]
) -> None:
    """Poll ``cond`` every 0.2 s until true; HarnessError naming ``what`` and the observation."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise HarnessError(f"{what}: not reached within {timeout:g}s; observed: {observed()}")
        time.sleep(0.2)


# ---- topology with unique topic names -----------------------------------------------------


def write_renamed_topology(src: Path, renames: Mapping[str, str], dest: Path) -> Path:
    """A topology file that loads ``src`` and renames its source/sink topics per ``renames``."""
    dest.write_text(
        "from integration.e2e.renamed import renamed\n"
        f"topology = renamed({str(src)!r}, {dict(renames)!r})\n"
    )
    return dest


def create_topics(bootstrap: str, topics: Mapping[str, int]) -> None:
    """Create ``topics`` without time-based retention: the input's event times lie in
    the past, and the broker would expire such records before the job reads them."""
    ensure_topics(
        make_admin(bootstrap),
        [TopicSpec(t, n, config={"retention.ms": "-1"}) for t, n in topics.items()],
    )


# ---- processes ---------------------------------------------------------------------------


@dataclass
class Proc:
    """One started OS process (one incarnation of a role) and its log file."""

    role: str
    popen: subprocess.Popen[bytes]
    log: Path
    started: float

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def lines_with(self, needle: str) -> list[str]:
        return [ln for ln in self.text().splitlines() if needle in ln]


@dataclass
class ControlLog:
    """Control-topic messages observed (read_committed), with the wall time they were read."""

    messages: list[tuple[float, Message]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def of(self, kind: type[Any]) -> list[tuple[float, Any]]:
        with self.lock:
            return [(t, m) for t, m in self.messages if isinstance(m, kind)]

    def completed_ids(self) -> list[int]:
        return sorted({m.checkpoint_id for _t, m in self.of(CheckpointCompleted)})

    def wait_for_more(self, n: int, what: str, within: float, alive: Callable[[], None]) -> None:
        """Until ``n`` checkpoints past the newest completed now complete; ``alive`` raises
        if the job died meanwhile."""
        after = max(self.completed_ids(), default=0)

        def more() -> bool:
            alive()
            return max(self.completed_ids(), default=0) >= after + n

        wait_until(what, more, within, lambda: f"completed {self.completed_ids()[-3:]}")


class ControlWatcher(threading.Thread):
    """Reads ``<app>.control`` from the beginning into a ControlLog until stopped."""

    def __init__(self, bootstrap: str, app: str) -> None:
        super().__init__(daemon=True, name=f"control-watch-{app}")
        self.log = ControlLog()
        self._stop_flag = threading.Event()
        self._consumer = make_consumer(bootstrap, f"{app}.e2e-watch", read_committed=True)
        self._consumer.assign([TopicPartition(control_topic(app), 0, 0)])
        self.malformed = 0

    def run(self) -> None:
        while not self._stop_flag.is_set():
            for rec in self._consumer.consume(200, 0.2):
                err = rec.error()
                if err is not None:
                    if err.fatal():
                        raise HarnessError(f"reading the control topic: {err.str()}")
                    continue  # end of partition, or brokers away (broker-failure tests)
                try:
                    msg = decode(rec.value())
                except ProtocolError:
                    self.malformed += 1
                    continue
                with self.log.lock:
                    self.log.messages.append((time.time(), msg))

    def stop(self) -> None:
        self._stop_flag.set()
        self.join(timeout=10)
        self._consumer.close()


@dataclass(frozen=True)
class JobSettings:
    """How the job under test runs (mapped onto the kstream CLI)."""

    checkpointing: bool = True
    guarantee: str | None = None  # None: the topology's (exactly-once)
    interval: float = 0.7
    session_timeout: float = 6.0
    heartbeat_timeout: float = 4.0
    restart_delay: float = 0.2
    workers: int = 3
    extra_args: tuple[str, ...] = ()  # more options for every process (e.g. --max-outage)
    # Python run before the CLI in every process (teeth checks with a mutant module)
    preamble: str = ""
    # The checkpoint store: "" is a file:// directory in the workdir; else a URL
    # (s3://...) with its --store-option settings.
    store_url: str = ""
    store_options: Mapping[str, str] = field(default_factory=dict)
    # "external": the harness runs `kstream coordinator`; "auto": the workers elect one
    # of them to host it (no coordinator process).
    coordinator: str = "external"
    # Successive failed checkpoints the job tolerates (a store outage fails one per interval).
    tolerable_failures: int = 50


class JobUnderTest:
    """Coordinator and workers of one app as real processes; logs under ``workdir``."""

    def __init__(
        self,
        bootstrap: str,
        app: str,
        topology_file: Path,
        workdir: Path,
        settings: JobSettings,
    ) -> None:
        self.bootstrap = bootstrap
        self.app = app
        self.topology_file = topology_file
        self.workdir = workdir
        self.settings = settings
        self.store_url = settings.store_url or f"file://{workdir / 'store'}"
        self.procs: list[Proc] = []  # every incarnation, in start order
        self.current: dict[str, Proc] = {}  # role -> live incarnation
        self.kills: list[tuple[float, str, str]] = []  # (wall time, role, why)
        self._n = 0
        # Command prefix per role (e.g. `ip netns exec <ns>`: a worker on another "host").
        self.prefix: dict[str, list[str]] = {}

    def _job_args(self) -> list[str]:
        s = self.settings
        args = [
            "--bootstrap",
            self.bootstrap,
            "--app-id",
            self.app,
            "--store",
            self.store_url,
            *[f"--store-option={k}={v}" for k, v in s.store_options.items()],
            "--interval",
            str(s.interval),
            "--timeout",
            "20",
            "--restart-delay",
            str(s.restart_delay),
            "--max-restarts",
            "200",
            "--tolerable-failures",
            str(s.tolerable_failures),
            "--retained",
            "100000",  # keep every checkpoint's metadata for the statistics
        ]
        if not s.checkpointing:
            args.append("--no-checkpointing")
        if s.guarantee:
            args += ["--guarantee", s.guarantee]
        return [*args, *s.extra_args]

    def store(self) -> CheckpointStore:
        """The job's checkpoint store, opened as the job opens it."""
        return open_store(self.store_url, self.settings.store_options)

    def _start(self, role: str, argv: list[str]) -> Proc:
        self._n += 1
        log = self.workdir / f"{self._n:02d}-{role}.log"
        fh = log.open("wb")
        code = f"{self.settings.preamble}\nfrom kstream.cli import main; main()"
        cmd = [*self.prefix.get(role, []), sys.executable, "-c", code, "-v", *argv]
        popen = subprocess.Popen(
            cmd, cwd=REPO, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ}
        )
        fh.close()
        p = Proc(role, popen, log, time.time())
        self.procs.append(p)
        self.current[role] = p
        return p

    def start_coordinator(self) -> Proc:
        return self._start(
            "coordinator",
            [
                "coordinator",
                str(self.topology_file),
                *self._job_args(),
                "--heartbeat-timeout",
                str(self.settings.heartbeat_timeout),
            ],
        )

    def start_worker(
        self, slot: int, pause_at: str | None = None, state: Path | None = None
    ) -> Proc:
        state = state or self.workdir / f"state-{slot}"
        argv = [
            "worker",
            str(self.topology_file),
            *self._job_args(),
            "--state-dir",
            str(state),
            "--session-timeout",
            str(self.settings.session_timeout),
            "--coordinator",
            self.settings.coordinator,
            "--heartbeat-timeout",
            str(self.settings.heartbeat_timeout),
        ]
        if pause_at:
            argv += ["--debug-pause-at", pause_at]
        return self._start(f"worker-{slot}", argv)

    def coordinator_host(self) -> str | None:
        """With an elected coordinator: the role of the live worker hosting it now."""
        for role, p in self.current.items():
            lines = [
                line
                for line in p.text().splitlines()
                if "coordinator election: elected" in line
                or "coordinator election: our coordinator ended" in line
            ]
            if lines and "elected (" in lines[-1]:
                return role
        return None

    def kill(self, role: str, why: str) -> Proc:
        """SIGKILL the live incarnation of ``role`` and reap it."""
        p = self.current.pop(role)
        os.kill(p.pid, signal.SIGKILL)
        p.popen.wait(timeout=10)
        self.kills.append((time.time(), role, why))
        print(f"[e2e] kill -9 {role} pid {p.pid}: {why}", flush=True)
        return p

    def assert_alive(self) -> None:
        dead = {r: p.popen.returncode for r, p in self.current.items() if not p.alive()}
        if dead:
            tails = "\n".join(
                f"--- {r} (rc {rc}) ---\n" + "\n".join(self.current[r].text().splitlines()[-30:])
                for r, rc in dead.items()
            )
            raise HarnessError(f"processes exited unexpectedly: {dead}\n{tails}")

    def wait_for_line(self, p: Proc, needle: str, timeout: float) -> str:
        """The first line of ``p``'s log containing ``needle``."""
        found: list[str] = []

        def cond() -> bool:
            found[:] = p.lines_with(needle)
            if not found and not p.alive():
                raise HarnessError(
                    f"{p.role} exited (rc {p.popen.returncode}) before printing {needle!r}:\n"
                    + "\n".join(p.text().splitlines()[-30:])
                )
            return bool(found)

        wait_until(
            f"{p.role} prints {needle!r}",
            cond,
            timeout,
            lambda: "\n".join(p.text().splitlines()[-10:]),
        )
        return found[0]

    def stop_all(self, timeout: float = 20.0) -> dict[str, int | None]:
        """SIGTERM the workers, then the coordinator (a worker's graceful stop asks it for
        a final checkpoint), wait (deadline), SIGKILL stragglers; their exit codes."""
        codes: dict[str, int | None] = {}
        deadline = time.monotonic() + timeout
        workers = {r: p for r, p in self.current.items() if r != "coordinator"}
        rest = {r: p for r, p in self.current.items() if r == "coordinator"}
        for group in (workers, rest):
            for p in group.values():
                if p.alive():
                    p.popen.send_signal(signal.SIGTERM)
            for role, p in group.items():
                try:
                    codes[role] = p.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    p.popen.kill()
                    p.popen.wait(timeout=10)
                    codes[role] = None
        self.current = {}
        return codes

    def kill_everything(self) -> None:
        """Cleanup: SIGKILL whatever is still running (never leave processes behind)."""
        for p in self.procs:
            if p.alive():
                p.popen.kill()
                p.popen.wait(timeout=10)
