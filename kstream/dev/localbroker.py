"""A real single-node Apache Kafka broker (KRaft) on this machine, for demos and tests.

Needs Java 17+. The broker's jars come from ``$KAFKA_HOME/libs`` when that is set,
else from Maven Central (:mod:`kstream.dev.maven`: resolved once and cached under
``$XDG_CACHE_HOME/kstream/kafka-<version>``, default ``~/.cache``).

Lifecycle: :meth:`LocalBroker.start` writes the KRaft configuration into the data
directory, formats the storage (first start only), starts the JVM and returns once
the broker answers a metadata request; :meth:`LocalBroker.stop` sends SIGTERM,
waits, and falls back to SIGKILL. The process itself (its own process group, dying
with its Python parent unless detached) is :mod:`kstream.dev.jvm`'s; a detached
broker (``kstream dev kafka start``) is found again through the pid recorded in
:class:`BrokerRecord`.

Every failure is a :class:`LocalBrokerError` whose message says what to do.
"""

from __future__ import annotations

import base64
import os
import re
import subprocess
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Unpack

from kstream.dev.jvm import (
    DevServerError,
    ServerKind,
    check_port_free,
    free_port,
    jvm_options,
    port_open,
    render_properties,
    tail,
)
from kstream.dev.maven import Jars, resolve
from kstream.dev.server import DevServer, ServerOptions, ServerRecord
from kstream.kafka.clients import KafkaException, make_admin

__all__ = [
    "KAFKA",
    "KAFKA_VERSION",
    "BrokerRecord",
    "LocalBroker",
    "LocalBrokerError",
    "broker_properties",
    "kafka_jars",
    "kafka_version_of",
    "log4j2_properties",
    "new_cluster_id",
    "previous_listeners",
    "previous_ports",
    "resolve_libs",
]

KAFKA_VERSION = "4.1.1"
SCALA_VERSION = "2.13"
LOG4J_VERSION = "2.24.3"


class LocalBrokerError(DevServerError):
    """The local broker could not be obtained, started or stopped; the message says why."""


KAFKA = ServerKind(
    name="Kafka broker",
    main_class="kafka.Kafka",
    error=LocalBrokerError,
    needs=f"Kafka {KAFKA_VERSION}",
    alternative="point KSTREAM_TEST_BOOTSTRAP / --bootstrap at an existing Kafka cluster",
    stop_command="kstream dev kafka stop",
)


# ---------------------------------------------------------------- jars


def kafka_jars(kafka_version: str = KAFKA_VERSION) -> Jars:
    """A complete Kafka broker classpath on Maven Central."""
    return Jars(
        name="kafka",
        version=kafka_version,
        dependencies=(
            ("org.apache.kafka", f"kafka_{SCALA_VERSION}", kafka_version),
            # Without an slf4j binding the broker's logs go to the NOP logger.
            ("org.apache.logging.log4j", "log4j-slf4j-impl", LOG4J_VERSION),
        ),
        proof="kafka_*.jar",
        what=f"Kafka {kafka_version}",
        alternative="set KAFKA_HOME to an unpacked Kafka distribution, or use an existing "
        "cluster (--bootstrap)",
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


def resolve_libs(env: Mapping[str, str] | None = None, kafka_version: str = KAFKA_VERSION) -> Path:
    """A directory of jars that runs a Kafka broker: ``$KAFKA_HOME/libs`` when
    ``KAFKA_HOME`` is set, else resolved from Maven Central once and cached."""
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
    return resolve(kafka_jars(kafka_version), env, error=LocalBrokerError)


# ---------------------------------------------------------------- configuration


def new_cluster_id() -> str:
    """A fresh KRaft cluster id: a random UUID in unpadded base64url (22 characters).

    Never starting with ``-``: ``kafka-storage format -t <id>`` would read such an id as
    an option and fail (1 start in 64 did)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def previous_listeners(props_file: Path) -> dict[str, int]:
    """Listener name -> port of the broker configured in ``props_file`` (a previous
    start on the same data; empty if there was none)."""
    try:
        text = props_file.read_text()
    except OSError:
        return {}
    listeners = re.search(r"^listeners=(.*)$", text, re.MULTILINE)
    found = re.findall(r"(\w+)://[^,]*:(\d+)", listeners.group(1)) if listeners else []
    return {name: int(port) for name, port in found}


def previous_ports(props_file: Path) -> tuple[int, int] | None:
    """``(client port, controller port)`` of the broker configured in ``props_file``
    (a previous start on the same data), or None."""
    ports = previous_listeners(props_file)
    if "PLAINTEXT" not in ports or "CONTROLLER" not in ports:
        return None
    return ports["PLAINTEXT"], ports["CONTROLLER"]


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


@dataclass(frozen=True)
class BrokerRecord(ServerRecord):
    """What a running broker leaves in its state directory so other commands find it:
    ``broker.json`` and a plain ``bootstrap`` file (for shell scripts)."""

    bootstrap: str
    pid: int
    data_dir: str
    log_file: str
    kafka_version: str
    more_pids: tuple[int, ...] = ()  # the other nodes of a local cluster

    KIND: ClassVar[ServerKind] = KAFKA
    FILE: ClassVar[str] = "broker.json"
    BOOTSTRAP_FILE: ClassVar[str] = "bootstrap"
    COMPANIONS: ClassVar[tuple[str, ...]] = (BOOTSTRAP_FILE,)

    @property
    def pids(self) -> tuple[int, ...]:
        """Every recorded broker pid (one per node)."""
        return (self.pid, *self.more_pids)

    @property
    def address(self) -> str:
        return self.bootstrap

    def describe(self) -> str:
        return f"Kafka {self.kafka_version}, log {self.log_file}"

    def companion_texts(self) -> dict[str, str]:
        return {self.BOOTSTRAP_FILE: self.bootstrap + "\n"}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BrokerRecord:
        return cls(**{**data, "more_pids": tuple(data.get("more_pids", ()))})


class LocalBroker(DevServer):
    """One single-node KRaft Kafka broker process with its data in ``data_dir``.

    Use as a context manager, or call :meth:`start` / :meth:`stop`. ``port=0``
    (default) picks a free port, or the one the broker had on a previous start on the
    same ``data_dir`` (so does ``controller_port=0``). ``detach=True`` keeps the broker running after
    this Python process exits (the caller records the pid and stops it later).
    """

    KIND: ClassVar[ServerKind] = KAFKA
    HEAP: ClassVar[str] = "512m"
    START_TIMEOUT: ClassVar[float] = 90.0
    STOP_TIMEOUT: ClassVar[float] = 20.0

    def __init__(
        self,
        data_dir: Path | str,
        *,
        controller_port: int = 0,
        overrides: Mapping[str, str] | None = None,
        cluster_id: str | None = None,
        jvm_extra: tuple[str, ...] = (),
        **options: Unpack[ServerOptions],
    ) -> None:
        super().__init__(data_dir, **options)
        # ``overrides``: server.properties entries that replace or add to the
        # single-node ones (a cluster node's id, quorum and replication; a SASL
        # listener); ``cluster_id``: the KRaft cluster id every node is formatted with.
        self.overrides = dict(overrides or {})
        self.jvm_extra = jvm_extra  # more JVM flags (a cluster's nodes: less JIT work)
        self.cluster_id = cluster_id
        self.controller_port = controller_port
        self.kafka_version = ""
        self.libs: Path | None = None
        self._admin: Any = None

    @property
    def bootstrap(self) -> str:
        """``host:port`` clients connect to."""
        return f"{self.host}:{self.port}"

    @property
    def address(self) -> str:
        return self.bootstrap

    @property
    def stdout_file(self) -> Path:
        """The JVM's own stdout/stderr (crashes before logging starts land here)."""
        return self.data_dir / "broker.out"

    @property
    def log_files(self) -> tuple[Path, ...]:
        """The JVM's stdout/stderr, then the broker's log4j log."""
        return (self.stdout_file, self.data_dir / "broker.log")

    def record(self) -> BrokerRecord:
        """A :class:`BrokerRecord` describing this running broker."""
        if self.pid is None:
            raise LocalBrokerError("broker is not started")
        return BrokerRecord(
            bootstrap=self.bootstrap,
            pid=self.pid,
            data_dir=str(self.data_dir),
            log_file=str(self.log_file),
            kafka_version=self.kafka_version,
        )

    def command(self, java: str) -> list[str]:
        """Get the jars, check the ports, write the configs, format the storage (first
        start of this data directory only): the broker's command line."""
        self.libs = resolve_libs(self._env)
        self.kafka_version = kafka_version_of(self.libs)
        self._claim_ports()
        props_file, log4j_file = self.write_config()
        classpath = f"{self.libs}/*"
        log_opts = [f"-Dlog4j2.configurationFile={log4j_file}", f"-Dkafka.logs.dir={self.data_dir}"]
        if not (self.data_dir / "logs" / "meta.properties").is_file():
            self._format_storage([java, "-Xmx256m", *log_opts, "-cp", classpath], props_file)
        cmd = [java, *jvm_options(self.heap), *self.jvm_extra, *log_opts, "-cp", classpath]
        self._admin = None
        return [*cmd, KAFKA.main_class, str(props_file)]

    def _claim_ports(self) -> None:
        # A restart on the same data keeps its ports: a saved bootstrap stays valid.
        before = previous_ports(self.data_dir / "server.properties")
        kept = before is not None and 0 in (self.port, self.controller_port)
        if before is not None:
            self.port = self.port or before[0]
            self.controller_port = self.controller_port or before[1]
        if self.port == 0:
            self.port = free_port(self.host)
        if self.controller_port == 0:
            self.controller_port = free_port(self.host)
            while self.controller_port == self.port:
                self.controller_port = free_port(self.host)
        try:
            check_port_free(KAFKA, self.host, self.port, "broker")
            check_port_free(KAFKA, self.host, self.controller_port, "controller")
        except LocalBrokerError as e:
            if not kept:
                raise
            raise LocalBrokerError(
                f"{e} (the port this data directory's broker had before, kept so a saved "
                f"bootstrap stays valid; free it, or give --port/--controller-port)"
            ) from e

    def write_config(self) -> tuple[Path, Path]:
        """Write server.properties (on ``port``/``controller_port``, with ``overrides``) and
        the log4j2 configuration; their paths."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        props_file = self.data_dir / "server.properties"
        props = broker_properties(self.data_dir, self.port, self.controller_port, self.host)
        props_file.write_text(render_properties({**props, **self.overrides}))
        log4j_file = self.data_dir / "log4j2.properties"
        log4j_file.write_text(log4j2_properties(self.log_file))
        return props_file, log4j_file

    def _format_storage(self, java: list[str], props_file: Path) -> None:
        """``kafka-storage format`` of a new data directory."""
        fmt = subprocess.run(
            # "--cluster-id=ID" in one argument: an id may start with "-" (base64url),
            # which the tool's argument parser would take for an option.
            [
                *java,
                "kafka.tools.StorageTool",
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
                f"(exit {fmt.returncode}):\n{tail(fmt.stdout + fmt.stderr)}"
            )

    def ready(self) -> bool:
        """Whether the broker answers a metadata request."""
        if not port_open(self.host, self.port):
            return False
        if self._admin is None:
            self._admin = make_admin(self.bootstrap, {"log_level": 0})
        try:
            return bool(self._admin.list_topics(timeout=1.0).brokers)
        except KafkaException:
            return False  # listening but not serving metadata yet: keep waiting
