"""The lifecycle every development server shares (kstream.dev.server, kstream.dev.jvm),
with a tiny stand-in server (a Python process) and a fake ``java`` (no JVM, no network).

The bug this guards: Linux's ``PR_SET_PDEATHSIG`` fires when the *thread* that forked a
child ends, not the process. A harness restarting brokers from a helper thread
(``LocalCluster.start_node`` runs ``LocalBroker.start``, i.e. ``DevServer.start``) lost
every broker it restarted when that thread ended.
"""

from __future__ import annotations

import stat
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import pytest

from kstream.dev.jvm import DevServerError, ServerKind, pid_alive
from kstream.dev.server import DevServer

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's"
)

MAIN = "kstream-test-sleeper"  # how the stand-in's command line is recognised
SLEEPER = ServerKind(
    name="sleeper",
    main_class=MAIN,
    error=DevServerError,
    needs="the sleeper",
    alternative="nothing",
    stop_command="none",
)


class Sleeper(DevServer):
    """A stand-in server: a Python process that sleeps, ready once it runs."""

    KIND: ClassVar[ServerKind] = SLEEPER

    @property
    def address(self) -> str:
        return "nowhere"

    @property
    def log_files(self) -> tuple[Path, ...]:
        return (self.data_dir / "sleeper.out",)

    def command(self, java: str) -> list[str]:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        return [sys.executable, "-c", "import time; time.sleep(600)", MAIN]

    def ready(self) -> bool:
        return True


def fake_java_env(tmp_path: Path) -> dict[str, str]:
    """A PATH whose ``java`` says it is Java 17 (the stand-in's command does not use it)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    java = bindir / "java"
    java.write_text("#!/bin/sh\necho 'openjdk version \"17.0.2\"' >&2\n")
    java.chmod(java.stat().st_mode | stat.S_IXUSR)
    return {"PATH": f"{bindir}:/usr/bin:/bin"}


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        time.sleep(0.02)


def signals_on_the_way(pid: int) -> int:
    """The pending signals of ``pid`` (its own and its thread group's), as a bit mask."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return int(fields["SigPnd"], 16) | int(fields["ShdPnd"], 16)


def test_a_server_started_from_a_thread_outlives_the_thread(tmp_path: Path) -> None:
    server = Sleeper(tmp_path / "data", heap="1m", start_timeout=30, env=fake_java_env(tmp_path))
    tids: list[int] = []

    def start() -> None:
        tids.append(threading.get_native_id())
        server.start()

    helper = threading.Thread(target=start)
    helper.start()
    helper.join()
    try:
        assert server.pid is not None
        # Once Linux no longer lists the thread, its exit is done: the death signals of
        # the children it forked are sent (the old code: SIGTERM, the server dies).
        wait_until(
            lambda: not Path(f"/proc/self/task/{tids[0]}").exists(), 30, "the thread is gone"
        )
        assert pid_alive(server.pid), "the server died with the thread that started it"
        assert signals_on_the_way(server.pid) == 0
    finally:
        server.stop()
    assert server.pid is None


def test_a_server_started_from_a_thread_still_dies_with_its_process(tmp_path: Path) -> None:
    """The process ends without any clean-up (``os._exit``): the server gets SIGTERM."""
    env = fake_java_env(tmp_path)
    script = textwrap.dedent(
        f"""
        import os, sys, threading
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_devserver import Sleeper
        server = Sleeper({str(tmp_path / "data")!r}, heap="1m", start_timeout=30, env={env!r})
        helper = threading.Thread(target=server.start)
        helper.start()
        helper.join()
        print(server.pid, flush=True)
        os._exit(0)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    pid = int(out.stdout)
    wait_until(lambda: not pid_alive(pid), 30, f"the orphaned server {pid} ends")
