"""A development server's JVM process, shared by every launcher of :mod:`kstream.dev`.

What is the same for every development server (the Kafka broker, S3Proxy, the
Schema Registry): finding a Java 17+ runtime; checking and picking loopback ports;
starting the JVM in its own process group (so a stop signals the whole tree) that
dies with its Python parent unless it is detached (``PR_SET_PDEATHSIG`` on Linux,
``atexit`` elsewhere); waiting until it serves; stopping it with SIGTERM, then
SIGKILL; and recognising a recorded pid (signalled only while it still runs the
server's main class, never a recycled one).

Linux ties ``PR_SET_PDEATHSIG`` to the *thread* that forked the child, not to the
process: a server started from a helper thread would die when that thread ends (a
harness restarting brokers from a thread lost them all). Every attached server is
therefore started by one launcher thread that lives as long as the process
(:func:`launch`).

Every failure raises the launcher's own :class:`DevServerError` subclass with a
message that says what to do.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MIN_JAVA = 17
_PR_SET_PDEATHSIG = 1


class DevServerError(RuntimeError):
    """A development server could not be obtained, started or stopped; the message says why."""


@dataclass(frozen=True)
class ServerKind:
    """One kind of development server, as the shared code names and recognises it."""

    name: str  # in messages: "Kafka broker", "S3Proxy"
    main_class: str  # the JVM's main class: how a recorded pid is recognised
    error: type[DevServerError]
    needs: str  # who needs Java 17+: "Kafka 4.1.1"
    alternative: str  # what a user without Java can do instead
    stop_command: str  # the command that stops a detached one


def tail(text: str, lines: int = 30) -> str:
    """The last ``lines`` lines of ``text``."""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def render_properties(props: Mapping[str, str]) -> str:
    """``key=value`` lines, as Java's Properties reads them."""
    return "".join(f"{k}={v}\n" for k, v in props.items())


def jvm_options(heap: str) -> list[str]:
    """JVM flags for a small shared machine: fixed modest heap, serial GC, headless."""
    return [
        f"-Xms{heap}",
        f"-Xmx{heap}",
        "-XX:+UseSerialGC",
        "-XX:+ExitOnOutOfMemoryError",
        "-Djava.awt.headless=true",
    ]


# ---- Java and ports --------------------------------------------------------------------


def find_java(kind: ServerKind, env: Mapping[str, str] | None = None) -> tuple[str, int]:
    """Path and major version of a Java 17+ runtime (``$JAVA_HOME/bin/java``, else PATH)."""
    env = os.environ if env is None else env
    java: str | None = None
    if env.get("JAVA_HOME"):
        candidate = Path(env["JAVA_HOME"]) / "bin" / "java"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            java = str(candidate)
    if java is None:
        java = shutil.which("java", path=env.get("PATH", ""))
    if java is None:
        raise kind.error(
            f"no Java runtime found (JAVA_HOME unset or invalid, no 'java' on PATH). "
            f"{kind.needs} needs Java {MIN_JAVA}+: install e.g. openjdk-{MIN_JAVA}-jre-headless, "
            f"or {kind.alternative}."
        )
    proc = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    out = proc.stderr + proc.stdout
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if m is None:
        raise kind.error(f"cannot tell the version of {java}: {out.strip()[:300]!r}")
    major = int(m.group(1))
    if major == 1 and m.group(2):  # "1.8.0_392" is Java 8
        major = int(m.group(2))
    if major < MIN_JAVA:
        raise kind.error(
            f"{java} is Java {major}; {kind.needs} needs Java {MIN_JAVA}+. "
            f"Install a newer JDK/JRE and set JAVA_HOME to it."
        )
    return java, major


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def check_port_free(kind: ServerKind, host: str, port: int, what: str) -> None:
    """Raise before starting anything if ``host:port`` (the server's ``what`` port) is taken."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            raise kind.error(
                f"{what} port {host}:{port} is already in use ({e.strerror}); choose another "
                f"port (0 for a free one) or stop the process holding it (e.g. "
                f"`{kind.stop_command}`)"
            ) from e


def port_open(host: str, port: int) -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


# ---- processes by pid --------------------------------------------------------------------


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is dead for our purposes (Linux: state 'Z' in /proc/<pid>/stat).
    stat = Path(f"/proc/{pid}/stat")
    with contextlib.suppress(OSError):
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return True


def runs_main_class(pid: int, main_class: str) -> bool:
    """Whether ``pid`` is a JVM running ``main_class`` (guards against a recycled pid)."""
    cmdline = Path(f"/proc/{pid}/cmdline")
    if cmdline.exists():
        with contextlib.suppress(OSError):
            return main_class.encode() in cmdline.read_bytes()
        return False
    proc = subprocess.run(["ps", "-p", str(pid), "-o", "command="], capture_output=True, text=True)
    return main_class in proc.stdout


def signal_group(pid: int, sig: signal.Signals) -> None:
    """Signal the process group ``pid`` leads (the process alone if it leads none)."""
    try:
        os.killpg(pid, sig)  # the JVM leads its own process group
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def stop_server(kind: ServerKind, pid: int, timeout: float) -> bool:
    """Stop the server JVM ``pid`` and its process group: SIGTERM, wait, then SIGKILL.

    Returns False if no such process was running. A pid that is alive but does not
    run ``kind``'s main class is left alone and raises ``kind.error``.
    """
    if not pid_alive(pid):
        return False
    if not runs_main_class(pid, kind.main_class):
        raise kind.error(
            f"pid {pid} is not the {kind.name} (no {kind.main_class} JVM); not stopping it"
        )
    signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.05)
    signal_group(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return True


def _die_with(parent: int) -> Callable[[], None]:
    """What runs in the child before exec: ask Linux to SIGTERM it when the thread that
    forked it ends (the launcher thread: when this process ends), and exit at once if
    ``parent`` is already gone (it died between the fork and the request)."""

    def request() -> None:
        if sys.platform.startswith("linux"):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
            if os.getppid() != parent:
                os._exit(1)

    return request


class _Launcher:
    """One daemon thread that forks every attached server and never ends before the
    process does: the thread ``PR_SET_PDEATHSIG`` watches."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._requests: queue.SimpleQueue[
            tuple[dict[str, Any], Future[subprocess.Popen[bytes]]]
        ] = queue.SimpleQueue()

    def popen(self, **kwargs: Any) -> subprocess.Popen[bytes]:
        """``subprocess.Popen(**kwargs)``, run on the launcher thread."""
        done: Future[subprocess.Popen[bytes]] = Future()
        with self._lock:
            if self._thread is None or not self._thread.is_alive():  # none yet, or forked
                self._thread = threading.Thread(
                    target=self._serve, name="kstream-dev-launcher", daemon=True
                )
                self._thread.start()
        self._requests.put((kwargs, done))
        return done.result()

    def _serve(self) -> None:
        while True:
            kwargs, done = self._requests.get()
            try:
                done.set_result(subprocess.Popen(**kwargs))
            except BaseException as e:  # handed to the caller, who raises it
                done.set_exception(e)


_LAUNCHER = _Launcher()


def launch(*, die_with_process: bool, **popen: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen(**popen)``; with ``die_with_process`` the child gets SIGTERM when
    this process ends (from whichever thread it is called: the launcher thread forks it)."""
    if not die_with_process:
        return subprocess.Popen(**popen)
    return _LAUNCHER.popen(**popen, preexec_fn=_die_with(os.getpid()))


# ---- one server process --------------------------------------------------------------------


class ServerProcess:
    """The JVM of one server while this Python process started it."""

    def __init__(self, kind: ServerKind) -> None:
        self.kind = kind
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """The JVM's pid while started."""
        return self._proc.pid if self._proc is not None else None

    def start(
        self,
        cmd: Sequence[str],
        *,
        output: Path,
        cwd: Path,
        env: Mapping[str, str],
        detach: bool,
    ) -> None:
        """Start ``cmd`` in its own process group, stdout and stderr appended to ``output``;
        unless ``detach``, it dies with this process."""
        if self._proc is not None:
            raise self.kind.error(f"{self.kind.name} already started (pid {self._proc.pid})")
        with open(output, "ab") as out:
            self._proc = launch(
                die_with_process=not detach,
                args=list(cmd),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=dict(env),
                start_new_session=True,  # own process group: stop() signals the whole tree
            )
        if not detach:
            atexit.register(self.stop)

    def wait_ready(
        self,
        ready: Callable[[], bool],
        *,
        address: str,
        timeout: float,
        log_file: Path,
        log_tail: Callable[[], str],
    ) -> None:
        """Return once ``ready()``; ``kind.error`` with the log's tail if the JVM exits first
        or ``timeout`` passes."""
        assert self._proc is not None
        deadline = time.monotonic() + timeout
        while True:
            code = self._proc.poll()
            if code is not None:
                raise self.kind.error(
                    f"{self.kind.name} exited with code {code} during start-up. "
                    f"Log: {log_file}\n{log_tail()}"
                )
            if ready():
                return
            if time.monotonic() > deadline:
                raise self.kind.error(
                    f"{self.kind.name} did not answer on {address} within {timeout:g}s. "
                    f"Log: {log_file}\n{log_tail()}"
                )
            time.sleep(0.1)

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout``; idempotent."""
        proc = self._forget()
        if proc is not None and proc.poll() is None:
            signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                signal_group(proc.pid, signal.SIGKILL)
                proc.wait(10)

    def kill(self) -> None:
        """SIGKILL at once (a crash, for failure tests); idempotent."""
        proc = self._forget()
        if proc is not None:
            signal_group(proc.pid, signal.SIGKILL)
            proc.wait(10)

    def wait(self) -> int:
        """Block until the JVM exits; its exit code."""
        if self._proc is None:
            raise self.kind.error(f"{self.kind.name} is not started")
        return self._proc.wait()

    def _forget(self) -> subprocess.Popen[bytes] | None:
        proc, self._proc = self._proc, None
        if proc is not None:
            with contextlib.suppress(ValueError):
                atexit.unregister(self.stop)
        return proc
