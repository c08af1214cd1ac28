"""A real single-node Apache Kafka broker (KRaft) on this machine, for demos and tests.

Needs Java 17+. The broker's jars come from ``$KAFKA_HOME/libs`` when that is set,
else from Maven Central (resolved once with ``mvn`` and cached under
``$XDG_CACHE_HOME/kstream/kafka-<version>``, default ``~/.cache``).

Lifecycle: :meth:`LocalBroker.start` writes the KRaft configuration into the data
directory, formats the storage (first start only), starts the JVM in its own
process group, and returns once the broker answers a metadata request.
:meth:`LocalBroker.stop` sends SIGTERM, waits, and falls back to SIGKILL. An
attached broker also dies with its Python parent (``PR_SET_PDEATHSIG`` on Linux,
``atexit`` elsewhere); a detached one (``kstream dev kafka start``) is found again
through the pid recorded in :class:`BrokerRecord`.

Every failure is a :class:`LocalBrokerError` whose message says what to do.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import ctypes
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from kstream.kafka.clients import KafkaException, make_admin

__all__ = [
    "KAFKA_VERSION",
    "BrokerRecord",
    "LocalBroker",
    "LocalBrokerError",
    "broker_properties",
    "cache_dir",
    "find_java",
    "free_port",
    "kafka_version_of",
    "log4j2_properties",
    "new_cluster_id",
    "resolution_pom",
    "resolve_libs",
    "stop_pid",
]

KAFKA_VERSION = "4.1.1"
SCALA_VERSION = "2.13"
LOG4J_VERSION = "2.24.3"
MIN_JAVA = 17
_MARKER = ".complete"
_PR_SET_PDEATHSIG = 1


class LocalBrokerError(RuntimeError):
    """The local broker could not be obtained, started or stopped; the message says why."""


# ---------------------------------------------------------------- environment


def find_java(env: Mapping[str, str] | None = None) -> tuple[str, int]:
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
        raise LocalBrokerError(
            f"no Java runtime found (JAVA_HOME unset or invalid, no 'java' on PATH). "
            f"The local Kafka broker needs Java {MIN_JAVA}+: install e.g. "
            f"openjdk-{MIN_JAVA}-jre-headless, or point KSTREAM_TEST_BOOTSTRAP / --bootstrap "
            f"at an existing Kafka cluster."
        )
    proc = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    out = proc.stderr + proc.stdout
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if m is None:
        raise LocalBrokerError(f"cannot tell the version of {java}: {out.strip()[:300]!r}")
    major = int(m.group(1))
    if major == 1 and m.group(2):  # "1.8.0_392" is Java 8
        major = int(m.group(2))
    if major < MIN_JAVA:
        raise LocalBrokerError(
            f"{java} is Java {major}; Kafka {KAFKA_VERSION} needs Java {MIN_JAVA}+. "
            f"Install a newer JDK/JRE and set JAVA_HOME to it."
        )
    return java, major


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where resolved Kafka jars are cached: ``$XDG_CACHE_HOME/kstream`` or ``~/.cache/kstream``."""
    env = os.environ if env is None else env
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kstream"


def resolution_pom(kafka_version: str = KAFKA_VERSION) -> str:
    """A throw-away Maven pom whose runtime dependencies are a complete Kafka broker classpath."""
    deps = [
        ("org.apache.kafka", f"kafka_{SCALA_VERSION}", kafka_version),
        # Without an slf4j binding the broker's logs go to the NOP logger.
        ("org.apache.logging.log4j", "log4j-slf4j-impl", LOG4J_VERSION),
    ]
    body = "\n".join(
        f"    <dependency><groupId>{g}</groupId><artifactId>{a}</artifactId>"
        f"<version>{v}</version></dependency>"
        for g, a, v in deps
    )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0">\n'
        "  <modelVersion>4.0.0</modelVersion>\n"
        "  <groupId>kstream.local</groupId><artifactId>kafka-broker</artifactId>"
        "<version>1</version>\n"
        f"  <dependencies>\n{body}\n  </dependencies>\n</project>\n"
    )


def kafka_version_of(libs: Path) -> str:
    """The Kafka version of a ``libs`` directory, from its ``kafka_<scala>-<version>.jar``."""
    for jar in sorted(libs.glob("kafka_*.jar")):
        m = re.fullmatch(r"kafka_[\d.]+-(.+)\.jar", jar.name)
        if m and not m.group(1).endswith(("-sources", "-javadoc", "-test")):
            return m.group(1)
    raise LocalBrokerError(
        f"{libs} holds no kafka_<scala>-<version>.jar: not a Kafka libs directory "
        f"(KAFKA_HOME must point at an unpacked Kafka distribution)"
    )


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def resolve_libs(env: Mapping[str, str] | None = None, kafka_version: str = KAFKA_VERSION) -> Path:
    """A directory of jars that runs a Kafka broker; downloads once, then reuses the cache.

    ``$KAFKA_HOME/libs`` wins when ``KAFKA_HOME`` is set. Otherwise the jars are
    resolved with ``mvn`` into the cache; a marker file written only after a
    complete resolution makes later calls skip Maven entirely.
    """
    env = os.environ if env is None else env
    if env.get("KAFKA_HOME"):
        libs = Path(env["KAFKA_HOME"]) / "libs"
        if not libs.is_dir():
            raise LocalBrokerError(
                f"KAFKA_HOME={env['KAFKA_HOME']} has no libs/ directory; "
                f"unset it to download Kafka {kafka_version}, or point it at an unpacked "
                f"Kafka distribution"
            )
        kafka_version_of(libs)
        return libs
    home = cache_dir(env) / f"kafka-{kafka_version}"
    libs = home / "libs"
    if (home / _MARKER).is_file():
        return libs
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be resolving right now
        if (home / _MARKER).is_file():
            return libs
        mvn = shutil.which("mvn", path=env.get("PATH", ""))
        if mvn is None:
            raise LocalBrokerError(
                f"Kafka {kafka_version} is not cached in {home} and Maven ('mvn') is not on "
                f"PATH to download it. Install Maven, or set KAFKA_HOME to an unpacked "
                f"Kafka distribution, or use an existing cluster (--bootstrap)."
            )
        shutil.rmtree(libs, ignore_errors=True)
        with tempfile.TemporaryDirectory(prefix="kstream-mvn-") as work:
            (Path(work) / "pom.xml").write_text(resolution_pom(kafka_version))
            cmd = [
                mvn,
                "-q",
                "-B",
                "dependency:copy-dependencies",
                "-DincludeScope=runtime",
                f"-DoutputDirectory={libs}",
            ]
            proc = subprocess.run(
                cmd, cwd=work, capture_output=True, text=True, env=dict(env), check=False
            )
        if proc.returncode != 0 or not any(libs.glob("kafka_*.jar")):
            raise LocalBrokerError(
                f"resolving Kafka {kafka_version} from Maven Central failed "
                f"(exit {proc.returncode}; needs network access to repo.maven.apache.org, "
                f"or set KAFKA_HOME). Last lines of mvn's output:\n"
                f"{_tail(proc.stdout + proc.stderr)}"
            )
        (home / _MARKER).write_text(f"{kafka_version}\n")
    return libs


# ---------------------------------------------------------------- configuration


def new_cluster_id() -> str:
    """A fresh KRaft cluster id: a random UUID in unpadded base64url (22 characters)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _check_port_free(host: str, port: int, what: str) -> None:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            raise LocalBrokerError(
                f"{what} port {host}:{port} is already in use ({e.strerror}); choose another "
                f"port (--port / --controller-port, or 0 for a free one) or stop the process "
                f"holding it (e.g. `kstream dev kafka stop`)"
            ) from e


def broker_properties(
    data_dir: Path, port: int, controller_port: int, host: str = "127.0.0.1"
) -> dict[str, str]:
    """The server.properties of a single-node KRaft broker+controller on loopback.

    Replication factors are 1 (one node) and thread pools are small: this broker
    shares a small machine with the job under test. Records are kept regardless of
    their timestamps (``log.retention.ms=-1``): demos and tests write synthetic event
    times far in the past, which the default 7-day retention would delete while they
    are still being read.
    """
    return {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{host}:{controller_port}",
        "listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{host}:{port}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(data_dir / "logs"),
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "10",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "10",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "num.network.threads": "2",
        "num.io.threads": "2",
        "num.recovery.threads.per.data.dir": "1",
        "background.threads": "2",
        "log.cleaner.threads": "1",
        "log.cleaner.dedupe.buffer.size": str(8 * 1024 * 1024),
        "auto.create.topics.enable": "false",
        "log.retention.ms": "-1",
    }


def render_properties(props: Mapping[str, str]) -> str:
    """``key=value`` lines, as Java's Properties reads them."""
    return "".join(f"{k}={v}\n" for k, v in props.items())


def log4j2_properties(log_file: Path) -> str:
    """A log4j2 configuration that writes the broker's log to ``log_file`` only."""
    return (
        "status = warn\n"
        "appender.file.type = File\n"
        "appender.file.name = FILE\n"
        f"appender.file.fileName = {log_file}\n"
        "appender.file.layout.type = PatternLayout\n"
        "appender.file.layout.pattern = [%d] %p %m (%c)%n\n"
        "rootLogger.level = INFO\n"
        "rootLogger.appenderRef.file.ref = FILE\n"
        "logger.state.name = state.change.logger\n"
        "logger.state.level = WARN\n"
        "logger.req.name = kafka.request.logger\n"
        "logger.req.level = WARN\n"
    )


def jvm_options(heap: str) -> list[str]:
    """JVM flags for a small shared machine: fixed modest heap, serial GC, headless."""
    return [
        f"-Xms{heap}",
        f"-Xmx{heap}",
        "-XX:+UseSerialGC",
        "-XX:+ExitOnOutOfMemoryError",
        "-Djava.awt.headless=true",
    ]


# ---------------------------------------------------------------- processes


def _pid_alive(pid: int) -> bool:
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


def _is_kafka_process(pid: int) -> bool:
    """Whether ``pid`` is a Kafka JVM (guards against killing a recycled pid)."""
    cmdline = Path(f"/proc/{pid}/cmdline")
    if cmdline.exists():
        with contextlib.suppress(OSError):
            return b"kafka.Kafka" in cmdline.read_bytes()
        return False
    proc = subprocess.run(["ps", "-p", str(pid), "-o", "command="], capture_output=True, text=True)
    return "kafka.Kafka" in proc.stdout


def stop_pid(pid: int, timeout: float = 20.0) -> bool:
    """Stop the broker JVM ``pid`` (and its process group): SIGTERM, wait, then SIGKILL.

    Returns False if no such broker process was running. A pid that is alive but
    is not a Kafka JVM is left alone and raises :class:`LocalBrokerError`.
    """
    if not _pid_alive(pid):
        return False
    if not _is_kafka_process(pid):
        raise LocalBrokerError(f"pid {pid} is not a Kafka broker; not stopping it")
    _signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _pid_alive(pid):
            return True
        time.sleep(0.05)
    _signal_group(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while _pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return True


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)  # the JVM leads its own process group
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _die_with_parent() -> None:
    """Runs in the child before exec: ask Linux to SIGTERM it when its parent dies."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


@dataclass(frozen=True)
class BrokerRecord:
    """What a running broker leaves in its state directory so other commands find it."""

    bootstrap: str
    pid: int
    data_dir: str
    log_file: str
    kafka_version: str
    more_pids: tuple[int, ...] = ()  # the other nodes of a local cluster

    FILE = "broker.json"
    BOOTSTRAP_FILE = "bootstrap"

    def write(self, state_dir: Path) -> None:
        """Write ``broker.json`` and a plain ``bootstrap`` file (for shell scripts)."""
        state_dir.mkdir(parents=True, exist_ok=True)
        tmp = state_dir / (self.FILE + ".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        tmp.replace(state_dir / self.FILE)
        (state_dir / self.BOOTSTRAP_FILE).write_text(self.bootstrap + "\n")

    @classmethod
    def read(cls, state_dir: Path) -> BrokerRecord | None:
        """The record in ``state_dir``, or None if there is none."""
        path = state_dir / cls.FILE
        if not path.is_file():
            return None
        data = json.loads(path.read_text())
        data["more_pids"] = tuple(data.get("more_pids", ()))
        return cls(**data)

    @classmethod
    def clear(cls, state_dir: Path) -> None:
        """Remove the record (the broker is gone)."""
        for name in (cls.FILE, cls.BOOTSTRAP_FILE):
            (state_dir / name).unlink(missing_ok=True)

    @property
    def pids(self) -> tuple[int, ...]:
        """Every recorded broker pid (one per node)."""
        return (self.pid, *self.more_pids)

    def is_running(self) -> bool:
        """Whether every recorded pid is still a live Kafka JVM."""
        return all(_pid_alive(p) and _is_kafka_process(p) for p in self.pids)


class LocalBroker:
    """One single-node KRaft Kafka broker process with its data in ``data_dir``.

    Use as a context manager, or call :meth:`start` / :meth:`stop`. ``port=0``
    (default) picks a free port. ``detach=True`` keeps the broker running after
    this Python process exits (the caller records the pid and stops it later).
    """

    def __init__(
        self,
        data_dir: Path | str,
        *,
        port: int = 0,
        controller_port: int = 0,
        host: str = "127.0.0.1",
        heap: str = "512m",
        start_timeout: float = 90.0,
        detach: bool = False,
        env: Mapping[str, str] | None = None,
        overrides: Mapping[str, str] | None = None,
        cluster_id: str | None = None,
        jvm_extra: tuple[str, ...] = (),
    ) -> None:
        # ``overrides``: server.properties entries that replace or add to the
        # single-node ones (a cluster node's id, quorum and replication; a SASL
        # listener); ``cluster_id``: the KRaft cluster id every node is formatted with.
        self.overrides = dict(overrides or {})
        self.jvm_extra = jvm_extra  # more JVM flags (a cluster's nodes: less JIT work)
        self.cluster_id = cluster_id
        self.data_dir = Path(data_dir).resolve()
        self.host = host
        self.port = port
        self.controller_port = controller_port
        self.heap = heap
        self.start_timeout = start_timeout
        self.detach = detach
        self._env = dict(os.environ if env is None else env)
        self._proc: subprocess.Popen[bytes] | None = None
        self.kafka_version = ""
        self.libs: Path | None = None

    @property
    def bootstrap(self) -> str:
        """``host:port`` clients connect to."""
        return f"{self.host}:{self.port}"

    @property
    def log_file(self) -> Path:
        """The broker's log4j log."""
        return self.data_dir / "broker.log"

    @property
    def stdout_file(self) -> Path:
        """The JVM's own stdout/stderr (crashes before logging starts land here)."""
        return self.data_dir / "broker.out"

    @property
    def pid(self) -> int | None:
        """The JVM's pid while started."""
        return self._proc.pid if self._proc is not None else None

    def record(self) -> BrokerRecord:
        """A :class:`BrokerRecord` describing this running broker."""
        if self._proc is None:
            raise LocalBrokerError("broker is not started")
        return BrokerRecord(
            bootstrap=self.bootstrap,
            pid=self._proc.pid,
            data_dir=str(self.data_dir),
            log_file=str(self.log_file),
            kafka_version=self.kafka_version,
        )

    def __enter__(self) -> LocalBroker:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> str:
        """Start the broker and return its bootstrap address once it answers metadata requests.

        Steps, in order: check Java, get the jars, check ports, write configs,
        format storage (first start of this data dir only), start the JVM, wait.
        """
        self.launch()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self.bootstrap

    def launch(self) -> None:
        """Start the JVM without waiting for it to serve (``wait_ready`` does): the
        nodes of a cluster must all run before any of them answers."""
        if self._proc is not None:
            raise LocalBrokerError(f"broker already started (pid {self._proc.pid})")
        java, _ = find_java(self._env)
        self.libs = resolve_libs(self._env)
        self.kafka_version = kafka_version_of(self.libs)
        if self.port == 0:
            self.port = free_port(self.host)
        if self.controller_port == 0:
            self.controller_port = free_port(self.host)
            while self.controller_port == self.port:
                self.controller_port = free_port(self.host)
        _check_port_free(self.host, self.port, "broker")
        _check_port_free(self.host, self.controller_port, "controller")

        self.data_dir.mkdir(parents=True, exist_ok=True)
        props_file = self.data_dir / "server.properties"
        props = broker_properties(self.data_dir, self.port, self.controller_port, self.host)
        props_file.write_text(render_properties({**props, **self.overrides}))
        log4j_file = self.data_dir / "log4j2.properties"
        log4j_file.write_text(log4j2_properties(self.log_file))
        classpath = f"{self.libs}/*"
        log_opts = [f"-Dlog4j2.configurationFile={log4j_file}", f"-Dkafka.logs.dir={self.data_dir}"]

        if not (self.data_dir / "logs" / "meta.properties").is_file():
            storage_tool = [
                java,
                "-Xmx256m",
                *log_opts,
                "-cp",
                classpath,
                "kafka.tools.StorageTool",
            ]
            fmt = subprocess.run(
                # "--cluster-id=ID" in one argument: an id may start with "-" (base64url),
                # which the tool's argument parser would take for an option.
                [
                    *storage_tool,
                    "format",
                    f"--cluster-id={self.cluster_id or new_cluster_id()}",
                    "-c",
                    str(props_file),
                ],
                capture_output=True,
                text=True,
                env=self._env,
                timeout=120,
            )
            if fmt.returncode != 0:
                raise LocalBrokerError(
                    f"formatting Kafka storage in {self.data_dir / 'logs'} failed "
                    f"(exit {fmt.returncode}):\n{_tail(fmt.stdout + fmt.stderr)}"
                )

        cmd = [
            java,
            *jvm_options(self.heap),
            *self.jvm_extra,
            *log_opts,
            "-cp",
            classpath,
            "kafka.Kafka",
        ]
        with open(self.stdout_file, "ab") as out:
            self._proc = subprocess.Popen(
                [*cmd, str(props_file)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.data_dir,
                env=self._env,
                start_new_session=True,  # own process group: stop() signals the whole tree
                preexec_fn=None if self.detach else _die_with_parent,
            )
        if not self.detach:
            atexit.register(self.stop)

    def wait_ready(self) -> None:
        """Return once the launched broker answers a metadata request (LocalBrokerError
        if it exits or does not answer within ``start_timeout``)."""
        assert self._proc is not None
        deadline = time.monotonic() + self.start_timeout
        admin = None
        while True:
            code = self._proc.poll()
            if code is not None:
                raise LocalBrokerError(
                    f"Kafka broker exited with code {code} during start-up. "
                    f"Log: {self.log_file}\n{self._log_tail()}"
                )
            if _port_open(self.host, self.port):
                if admin is None:
                    admin = make_admin(self.bootstrap, {"log_level": 0})
                try:
                    md = admin.list_topics(timeout=1.0)
                    if md.brokers:
                        return
                except KafkaException:
                    pass  # listening but not serving metadata yet: keep waiting
            if time.monotonic() > deadline:
                raise LocalBrokerError(
                    f"Kafka broker did not answer on {self.bootstrap} within "
                    f"{self.start_timeout:g}s. Log: {self.log_file}\n{self._log_tail()}"
                )
            time.sleep(0.1)

    def _log_tail(self, lines: int = 25) -> str:
        parts = []
        for f in (self.stdout_file, self.log_file):
            if f.is_file() and f.stat().st_size:
                parts.append(f"--- {f.name} ---\n{_tail(f.read_text(errors='replace'), lines)}")
        return "\n".join(parts) or "(no log output)"

    def stop(self, timeout: float = 20.0) -> None:
        """Stop the broker (SIGTERM, then SIGKILL after ``timeout``); idempotent."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(ValueError):
            atexit.unregister(self.stop)
        if proc.poll() is None:
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait(10)

    def kill(self) -> None:
        """SIGKILL the broker at once (a crash, for failure tests); idempotent."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(ValueError):
            atexit.unregister(self.stop)
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def wait(self) -> int:
        """Block until the broker process exits; its exit code."""
        if self._proc is None:
            raise LocalBrokerError("broker is not started")
        return self._proc.wait()


def _port_open(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0
