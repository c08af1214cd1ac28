"""One development server's lifecycle, the same for every launcher of :mod:`kstream.dev`.

:class:`DevServer` is what the Kafka broker, S3Proxy and the Schema Registry share
above their JVM process (:class:`~kstream.dev.jvm.ServerProcess`): ``start`` finds
Java, lets the server prepare its command (jars, ports, configuration files), starts
the JVM and waits until the server answers, stopping it again if it does not; then
``stop``, ``kill``, ``wait`` and a context manager. A server says only what differs:
its :class:`~kstream.dev.jvm.ServerKind`, its command, its readiness check and its
log files.

:class:`ServerRecord` is what a detached server leaves in its state directory, by
which ``kstream dev ... stop|status`` find it again.
"""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar, Self, TypedDict

from kstream.dev.jvm import (
    ServerKind,
    ServerProcess,
    check_port_free,
    find_java,
    free_port,
    pid_alive,
    runs_main_class,
    stop_server,
    tail,
)


class ServerOptions(TypedDict, total=False):
    """What every server takes besides its data directory (see :class:`DevServer`)."""

    host: str
    port: int
    heap: str | None
    start_timeout: float | None
    detach: bool
    env: Mapping[str, str] | None


class DevServer(ABC):
    """One development server's JVM with its files in ``data_dir``; see the module doc.

    ``port=0`` picks a free port (kept for a later ``start``: a restart after ``stop``
    serves on the same address). ``heap`` and ``start_timeout`` default to the server's
    ``HEAP`` and ``START_TIMEOUT``. ``detach=True`` keeps the server running after this
    Python process exits; otherwise it dies with it, whichever thread started it.
    """

    KIND: ClassVar[ServerKind]
    HEAP: ClassVar[str] = "256m"
    START_TIMEOUT: ClassVar[float] = 60.0
    STOP_TIMEOUT: ClassVar[float] = 15.0

    def __init__(
        self,
        data_dir: Path | str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        heap: str | None = None,
        start_timeout: float | None = None,
        detach: bool = False,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.host = host
        self.port = port
        self.heap = heap or self.HEAP
        self.start_timeout = self.START_TIMEOUT if start_timeout is None else start_timeout
        self.detach = detach
        self._env = dict(os.environ if env is None else env)
        self._process = ServerProcess(self.KIND)

    # ---- what a server says

    @property
    @abstractmethod
    def address(self) -> str:
        """Where clients reach it (in messages, and what ``start`` returns)."""

    @property
    @abstractmethod
    def log_files(self) -> tuple[Path, ...]:
        """Its log files; the first one receives the JVM's stdout and stderr."""

    @abstractmethod
    def command(self, java: str) -> list[str]:
        """Get the jars, choose the ports, write the configuration: the JVM's command line."""

    @abstractmethod
    def ready(self) -> bool:
        """Whether the launched server serves clients."""

    # ---- the lifecycle

    @property
    def log_file(self) -> Path:
        """The log a failure message points at."""
        return self.log_files[-1]

    @property
    def pid(self) -> int | None:
        """The JVM's pid while started."""
        return self._process.pid

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> str:
        """Start the server; its address once it answers (stopped again if it does not)."""
        self.launch()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self.address

    def launch(self) -> None:
        """Start the JVM without waiting for it to serve (``wait_ready`` does)."""
        if self.pid is not None:
            raise self.KIND.error(f"{self.KIND.name} already started (pid {self.pid})")
        java, _ = find_java(self.KIND, self._env)
        cmd = self.command(java)
        self._process.start(
            cmd,
            output=self.log_files[0],
            cwd=self.data_dir,
            env=self._env,
            detach=self.detach,
        )

    def wait_ready(self) -> None:
        """Return once the launched server is ready (``KIND.error`` with its log's tail if
        it exits or is not ready within ``start_timeout``)."""
        self._process.wait_ready(
            self.ready,
            address=self.address,
            timeout=self.start_timeout,
            log_file=self.log_file,
            log_tail=self.log_tail,
        )

    def claim_port(self, what: str) -> None:
        """Pick a free ``port`` if it is 0; raise if it is taken (before starting anything)."""
        if self.port == 0:
            self.port = free_port(self.host)
        check_port_free(self.KIND, self.host, self.port, what)

    def log_tail(self, lines: int = 25) -> str:
        """The last lines of each non-empty log (headed by its name when there are several)."""
        logs = [f for f in self.log_files if f.is_file() and f.stat().st_size]
        texts = [tail(f.read_text(errors="replace"), lines) for f in logs]
        if len(self.log_files) == 1:
            return texts[0] if texts else "(no log output)"
        parts = [f"--- {f.name} ---\n{text}" for f, text in zip(logs, texts, strict=True)]
        return "\n".join(parts) or "(no log output)"

    def stop(self, timeout: float | None = None) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` (default ``STOP_TIMEOUT``); idempotent."""
        self._process.stop(self.STOP_TIMEOUT if timeout is None else timeout)

    def kill(self) -> None:
        """SIGKILL at once (a crash, for failure tests); idempotent."""
        self._process.kill()

    def wait(self) -> int:
        """Block until the server exits; its exit code."""
        return self._process.wait()


# ---- what a detached server leaves behind ---------------------------------------------------


@dataclass(frozen=True)
class ServerRecord(ABC):
    """Base of what a running server leaves in its state directory so other commands find
    it: ``FILE`` (its fields as JSON) and the ``COMPANIONS`` (small files for shells)."""

    KIND: ClassVar[ServerKind]
    FILE: ClassVar[str]
    COMPANIONS: ClassVar[tuple[str, ...]] = ()

    @property
    @abstractmethod
    def pids(self) -> tuple[int, ...]:
        """Every recorded pid."""

    @property
    @abstractmethod
    def address(self) -> str:
        """Where clients reach the server."""

    @abstractmethod
    def describe(self) -> str:
        """What ``status`` prints after "running at ADDRESS"."""

    def companion_texts(self) -> dict[str, str]:
        """The text of each of ``COMPANIONS``."""
        return {}

    def write(self, state_dir: Path) -> None:
        """Write ``FILE`` (atomically) and the companions."""
        state_dir.mkdir(parents=True, exist_ok=True)
        tmp = state_dir / (self.FILE + ".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        tmp.replace(state_dir / self.FILE)
        for name, text in self.companion_texts().items():
            (state_dir / name).write_text(text)

    @classmethod
    def read(cls, state_dir: Path) -> Self | None:
        """The record in ``state_dir``, or None if there is none."""
        path = state_dir / cls.FILE
        if not path.is_file():
            return None
        return cls.from_json(json.loads(path.read_text()))

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Self:
        """The record of ``FILE``'s content."""
        return cls(**data)

    @classmethod
    def clear(cls, state_dir: Path) -> None:
        """Remove the record and its companions (the server is gone)."""
        for name in (cls.FILE, *cls.COMPANIONS):
            (state_dir / name).unlink(missing_ok=True)

    def is_running(self) -> bool:
        """Whether every recorded pid is still a live JVM of this kind of server."""
        return all(pid_alive(p) and runs_main_class(p, self.KIND.main_class) for p in self.pids)

    def stop(self, timeout: float = 20.0) -> list[int]:
        """Stop every recorded server JVM; the pids that were running (``KIND.error`` if a
        recorded pid now runs something else)."""
        return [pid for pid in self.pids if stop_server(self.KIND, pid, timeout)]
