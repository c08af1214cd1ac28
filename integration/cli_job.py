"""A job started with the ``kstream`` command line, for the integration tests.

``run_args`` is the ``kstream -v run`` command of a topology file with a file store
and a state directory under the test's temporary directory; :class:`CliJob` runs a
command with its output in a log file, and its waits fail with the log's tail, or
at once when the process exited before the condition held.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from integration.e2e.harness import REPO
from kstream.kafka.clients import TopicSpec, ensure_topics, make_admin

__all__ = ["CLI", "KEYED_COUNT", "CliJob", "keyed_count_job", "run_args", "run_to_end"]

CLI = [sys.executable, "-c", "from kstream.cli import main; main()"]


#: A topology file's text: ``{src}``'s JSON values ``{"user": u, "t": ms}`` counted per user
#: in 1 s tumbling windows of ``t`` (through a repartition topic), ``[user, start, count]``
#: rows to ``{out}``.
KEYED_COUNT = """
from kstream.api import Topology, Tumbling

topology = Topology("keyedcount")
(
    topology.source("{src}", timestamp=lambda v, kafka_ts: v["t"])
    .key_by(lambda v: v["user"], key_serde="str")
    .window(Tumbling(1000))
    .count()
    .map(lambda r: [r.key, r.start, r.value])
    .to("{out}", key_serde="str", value_serde="json")
)
"""


def keyed_count_job(
    bootstrap: str, unique_name: Callable[[str], str], tmp: Path, partitions: int = 2
) -> tuple[str, str, str, Path]:
    """``(source, sink, app id, topology file)`` of a fresh :data:`KEYED_COUNT` job, its
    source topic created with ``partitions`` partitions, its sink with 2."""
    src, out, app = unique_name("users"), unique_name("counts"), unique_name("app")
    ensure_topics(make_admin(bootstrap), [TopicSpec(src, partitions), TopicSpec(out, 2)])
    topology = tmp / "keyedcount.py"
    topology.write_text(KEYED_COUNT.format(src=src, out=out))
    return src, out, app, topology


def run_args(
    topology: Path, bootstrap: str, app: str, tmp: Path, *extra: str, interval: float = 1.0
) -> list[str]:
    """``kstream -v run`` of ``topology`` with store ``tmp/store`` and state ``tmp/state``."""
    return [*CLI, "-v", "run", str(topology), "--bootstrap", bootstrap, "--app-id", app,
            "--store", f"file://{tmp}/store", "--state-dir", str(tmp / "state"),
            "--interval", str(interval), *extra]  # fmt: skip


def run_to_end(args: list[str], timeout: float) -> tuple[int, str]:
    """Run ``args`` to its exit: (exit code, stdout and stderr)."""
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    return done.returncode, done.stdout + done.stderr


class CliJob:
    """``args`` running with stdout and stderr in ``log_file``."""

    def __init__(self, args: list[str], log_file: Path, env: dict[str, str] | None = None) -> None:
        self.log_file = log_file
        self.proc = subprocess.Popen(
            args, stdout=log_file.open("w"), stderr=subprocess.STDOUT, cwd=REPO, env=env
        )

    def log(self) -> str:
        return self.log_file.read_text()

    def tail(self, chars: int = 3000) -> str:
        return self.log()[-chars:]

    def wait_until(self, cond: Callable[[], bool], what: str, within: float) -> None:
        """Until ``cond()``; AssertionError if the job exits first or ``within`` s pass."""
        deadline = time.monotonic() + within
        while not cond():
            assert self.proc.poll() is None, (
                f"job exited ({self.proc.returncode}) before {what}: {self.tail()}"
            )
            assert time.monotonic() < deadline, f"no {what} within {within} s: {self.tail()}"
            time.sleep(0.1)

    def wait_for(self, pattern: str, within: float, since: int = 0) -> re.Match[str]:
        """The first match of ``pattern`` in the log after its offset ``since``, waited for
        as :meth:`wait_until`."""
        found: list[re.Match[str]] = []

        def seen() -> bool:
            m = re.search(pattern, self.log()[since:])
            if m:
                found.append(m)
            return m is not None

        self.wait_until(seen, repr(pattern), within)
        return found[0]

    def wait(self, timeout: float) -> int:
        """The exit code, waited for up to ``timeout`` s."""
        return self.proc.wait(timeout=timeout)

    def stop(self, timeout: float = 60.0) -> tuple[int, float]:
        """SIGTERM; (exit code, seconds until the exit)."""
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=timeout)
        return code, time.monotonic() - t0

    def kill(self) -> None:
        """kill -9 if still running."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
