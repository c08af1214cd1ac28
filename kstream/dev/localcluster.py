"""Local Kafka beyond one plain broker: a SASL listener, and a cluster of several nodes.

For tests and demos of production settings on one machine, from the same cached
Maven Central jars as :class:`~kstream.dev.localbroker.LocalBroker`:

- ``sasl_users``: each node also listens with ``SASL_PLAINTEXT`` (mechanism
  PLAIN), its users in the JAAS line of the broker's own configuration
  (``listener.name.sasl_plaintext.plain.sasl.jaas.config``). Brokers talk to
  each other over the plain listener, which readiness checks use too.
- :class:`KafkaCluster`: what tests use of any multi-node cluster (addresses, one
  node's crash and restart, leaders, replicas in sync); the integration tests'
  testcontainers cluster (``integration/docker/kafka_cluster.py``) is one too.
- :class:`LocalCluster`: N KRaft nodes (each broker and controller, the quorum
  of all N) as N processes on loopback ports, the brokers' internal topics at
  replication factor N and min ISR N-1, new topics at N replicas by default.
  Sized for a small shared machine (small heaps, few threads, C1 only). A cluster
  started again on the same data directory keeps its ports (saved bootstraps and
  the quorum stay valid).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from pathlib import Path

from kstream.dev.jvm import free_port
from kstream.dev.localbroker import (
    BrokerRecord,
    LocalBroker,
    LocalBrokerError,
    new_cluster_id,
    previous_listeners,
)
from kstream.kafka.clients import KafkaException, make_admin

SASL_MECHANISM = "PLAIN"
_SASL = "SASL_PLAINTEXT"


def sasl_properties(
    host: str, port: int, sasl_port: int, controller_port: int, users: Mapping[str, str]
) -> dict[str, str]:
    """server.properties entries adding a SASL_PLAINTEXT (PLAIN) listener for ``users``."""
    for name, password in users.items():
        if not name.isidentifier() or '"' in password or "\\" in password:
            raise LocalBrokerError(
                f"SASL user {name!r}: use a name of letters, digits and '_' and a password without quotes"
            )
    jaas = " ".join(f'user_{name}="{password}"' for name, password in users.items())
    return {
        "listeners": f"PLAINTEXT://{host}:{port},{_SASL}://{host}:{sasl_port},"
        f"CONTROLLER://{host}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{host}:{port},{_SASL}://{host}:{sasl_port}",
        "listener.security.protocol.map": f"PLAINTEXT:PLAINTEXT,{_SASL}:{_SASL},"
        "CONTROLLER:PLAINTEXT",
        "sasl.enabled.mechanisms": SASL_MECHANISM,
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {jaas};"
        ),
    }


def client_settings(bootstrap: str, user: str, password: str) -> dict[str, str]:
    """Client settings (a client.properties' content) for the SASL listener as ``user``."""
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": _SASL,
        "sasl.mechanism": SASL_MECHANISM,
        "sasl.username": user,
        "sasl.password": password,
    }


def cluster_properties(node_id: int, voters: str, size: int) -> dict[str, str]:
    """server.properties entries of node ``node_id`` in a KRaft cluster of ``size`` nodes."""
    min_isr = str(max(1, size - 1))
    return {
        "node.id": str(node_id),
        "controller.quorum.voters": voters,
        "default.replication.factor": str(size),
        "min.insync.replicas": min_isr,
        "offsets.topic.replication.factor": str(size),
        "transaction.state.log.replication.factor": str(size),
        "transaction.state.log.min.isr": min_isr,
        "share.coordinator.state.topic.replication.factor": str(size),
        "share.coordinator.state.topic.min.isr": min_isr,
        "num.replica.fetchers": "1",
        # A restarted node takes its partitions' leadership back soon (rolling restarts).
        "leader.imbalance.check.interval.seconds": "10",
        "controlled.shutdown.enable": "true",
        "unclean.leader.election.enable": "false",
    }


class KafkaCluster(ABC):
    """What tests need of a multi-node cluster, however its nodes run: addresses, one
    node's crash/stop/start, and what the cluster's metadata says (leaders, brokers,
    replicas in sync). Subclasses set ``host``, ``size``, ``ports`` (plain listeners),
    ``sasl_ports`` and ``sasl_users``, and run the nodes (processes, containers)."""

    host: str
    size: int
    ports: list[int]
    sasl_ports: list[int]
    sasl_users: dict[str, str]

    @property
    def bootstrap(self) -> str:
        """Every node's plain listener, comma-separated."""
        return ",".join(f"{self.host}:{p}" for p in self.ports)

    @property
    def sasl_bootstrap(self) -> str:
        """Every node's SASL listener, comma-separated ('' without SASL)."""
        return ",".join(f"{self.host}:{p}" for p in self.sasl_ports)

    @property
    @abstractmethod
    def kafka_version(self) -> str: ...

    def client_properties(self, user: str) -> str:
        """A client.properties for the SASL listener as ``user`` (contains the password)."""
        settings = client_settings(self.sasl_bootstrap, user, self.sasl_users[user])
        return "".join(f"{k}={v}\n" for k, v in settings.items())

    # ---- the nodes

    @abstractmethod
    def start(self) -> str:
        """Start every node (none running); the bootstrap once all answer and see each other."""

    @abstractmethod
    def stop(self) -> None:
        """Stop every node; idempotent."""

    @abstractmethod
    def kill(self, index: int) -> None:
        """Kill node ``index`` (0-based) at once: a crash."""

    @abstractmethod
    def stop_node(self, index: int, timeout: float = 60.0) -> None:
        """Stop node ``index`` (SIGTERM: a controlled shutdown) and wait until it exited."""

    @abstractmethod
    def start_node(self, index: int) -> None:
        """Start node ``index`` again (same ports and data) and wait until it answers."""

    @abstractmethod
    def running(self) -> list[int]:
        """Indexes of the nodes that run."""

    # ---- what the cluster says

    def node_of(self, broker_id: int) -> int:
        """The index of the node with broker id ``broker_id``."""
        return broker_id - 1

    def leader(self, topic: str, partition: int = 0, timeout: float = 30.0) -> int:
        """Index of the node that leads ``topic``'s ``partition`` now."""
        deadline = time.monotonic() + timeout
        admin = make_admin(self._live_bootstrap(), {"log_level": 0})
        while True:
            try:
                md = admin.list_topics(topic, timeout=5.0)
                t = md.topics.get(topic)
                if t is not None and t.error is None and partition in t.partitions:
                    leader = t.partitions[partition].leader
                    if leader >= 0:
                        return self.node_of(leader)
            except KafkaException:
                pass
            if time.monotonic() > deadline:
                raise LocalBrokerError(f"{topic}[{partition}] has no leader after {timeout}s")
            time.sleep(0.2)

    def wait_brokers(self, count: int, timeout: float = 60.0) -> None:
        """Wait until the cluster's metadata lists ``count`` brokers."""
        deadline = time.monotonic() + timeout
        admin = make_admin(self._live_bootstrap(), {"log_level": 0})
        seen = 0
        while True:
            try:
                seen = len(admin.list_topics(timeout=5.0).brokers)
                if seen >= count:
                    return
            except KafkaException:
                pass
            if time.monotonic() > deadline:
                raise LocalBrokerError(f"{seen} of {count} brokers after {timeout}s")
            time.sleep(0.2)

    def wait_in_sync(self, topics: Iterable[str] | None = None, timeout: float = 120.0) -> None:
        """Wait until every partition of ``topics`` (default: all) has all replicas in sync."""
        deadline = time.monotonic() + timeout
        admin = make_admin(self._live_bootstrap(), {"log_level": 0})
        wanted = set(topics) if topics is not None else None
        behind: list[str] = []
        while True:
            try:
                md = admin.list_topics(timeout=5.0)
                behind = [
                    f"{name}[{p.id}] isr={sorted(p.isrs)} replicas={sorted(p.replicas)}"
                    for name, t in md.topics.items()
                    if wanted is None or name in wanted
                    for p in t.partitions.values()
                    if set(p.isrs) != set(p.replicas) or p.leader < 0
                ]
                if not behind:
                    return
            except KafkaException as e:
                behind = [str(e)]
            if time.monotonic() > deadline:
                raise LocalBrokerError(
                    f"replicas not in sync after {timeout}s: {', '.join(behind[:5])}"
                )
            time.sleep(0.5)

    def _live_bootstrap(self) -> str:
        live = self.running() or list(range(self.size))
        return ",".join(f"{self.host}:{self.ports[i]}" for i in live)


class LocalCluster(KafkaCluster):
    """``size`` KRaft nodes on loopback; ``sasl_users`` adds a SASL listener to each.

    ``start`` launches every node, then waits until each answers and the cluster
    reports all of them. ``kill(i)`` / ``stop_node(i)`` / ``start_node(i)`` act on one
    node (same ports and data directory on restart).
    """

    def __init__(
        self,
        data_dir: Path | str,
        *,
        size: int = 3,
        host: str = "127.0.0.1",
        heap: str = "320m",
        start_timeout: float = 180.0,
        sasl_users: Mapping[str, str] | None = None,
        detach: bool = False,
        env: Mapping[str, str] | None = None,
    ) -> None:
        if size < 1:
            raise LocalBrokerError(f"a cluster needs at least one node, got {size}")
        self.data_dir = Path(data_dir).resolve()
        self.size = size
        self.host = host
        self.sasl_users = dict(sasl_users or {})
        listeners = ["PLAINTEXT", "CONTROLLER", *([_SASL] if self.sasl_users else [])]
        ports = cluster_ports(self.data_dir, host, size, listeners)
        self.ports = ports[:size]
        self.controller_ports = ports[size : 2 * size]
        self.sasl_ports = ports[2 * size :]
        voters = ",".join(f"{i + 1}@{host}:{p}" for i, p in enumerate(self.controller_ports))
        cluster_id = new_cluster_id()
        self.nodes: list[LocalBroker] = []
        for i in range(size):
            overrides = cluster_properties(i + 1, voters, size) if size > 1 else {}
            if self.sasl_users:
                overrides |= sasl_properties(
                    host,
                    self.ports[i],
                    self.sasl_ports[i],
                    self.controller_ports[i],
                    self.sasl_users,
                )
            self.nodes.append(
                LocalBroker(
                    self.data_dir / f"node-{i + 1}",
                    port=self.ports[i],
                    controller_port=self.controller_ports[i],
                    host=host,
                    heap=heap,
                    start_timeout=start_timeout,
                    detach=detach,
                    env=env,
                    overrides=overrides,
                    cluster_id=cluster_id,
                    # N JVMs on a small machine: the quick compiler only (faster
                    # start-up and restarts, less CPU taken from the job).
                    jvm_extra=("-XX:TieredStopAtLevel=1", "-XX:CICompilerCount=1"),
                )
            )
        self.start_timeout = start_timeout

    @property
    def kafka_version(self) -> str:
        return self.nodes[0].kafka_version

    def record(self) -> BrokerRecord:
        """A record of the running cluster (``kstream dev kafka stop`` stops every node)."""
        pids = [n.pid for n in self.nodes]
        if None in pids:
            raise LocalBrokerError("cluster is not started")
        return BrokerRecord(
            bootstrap=self.bootstrap,
            pid=int(pids[0] or 0),
            data_dir=str(self.data_dir),
            log_file=str(self.nodes[0].log_file),
            kafka_version=self.kafka_version,
            more_pids=tuple(int(p or 0) for p in pids[1:]),
        )

    def start(self) -> str:
        """Start every node; the bootstrap once all answer and see each other."""
        try:
            for node in self.nodes:
                node.launch()
            for node in self.nodes:
                node.wait_ready()
            self.wait_brokers(self.size, self.start_timeout)
        except BaseException:
            self.stop()
            raise
        return self.bootstrap

    def stop(self) -> None:
        """Stop every node (SIGTERM, then SIGKILL); idempotent."""
        for node in self.nodes:
            node.stop()

    def wait(self) -> int:
        """Block until the first node exits; its exit code."""
        return self.nodes[0].wait()

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- one node

    def kill(self, index: int) -> None:
        """SIGKILL node ``index`` (0-based): a crash."""
        self.nodes[index].kill()

    def stop_node(self, index: int, timeout: float = 60.0) -> None:
        """SIGTERM node ``index`` and wait until it exited (a controlled shutdown)."""
        self.nodes[index].stop(timeout)  # SIGKILL only if it did not stop within timeout

    def start_node(self, index: int) -> None:
        """Start node ``index`` again (same ports and data) and wait until it answers."""
        self.nodes[index].start()

    def running(self) -> list[int]:
        """Indexes of the nodes whose process runs."""
        return [i for i, n in enumerate(self.nodes) if n.pid is not None]


def distinct_ports(host: str, n: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < n:
        p = free_port(host)
        if p not in ports:
            ports.append(p)
    return ports


def cluster_ports(data_dir: Path, host: str, size: int, listeners: list[str]) -> list[int]:
    """Each of ``listeners``' ports for nodes 1..``size`` (listener by listener): the ones
    the nodes had on a previous start in ``data_dir`` (a restart keeps its bootstrap and
    quorum), the others free and distinct."""
    before = [
        previous_listeners(data_dir / f"node-{i + 1}" / "server.properties") for i in range(size)
    ]
    kept = [node.get(name) for name in listeners for node in before]
    taken = {p for p in kept if p is not None}
    if len(taken) != len(kept) - kept.count(None):  # a damaged configuration: start afresh
        kept, taken = [None] * len(kept), set()
    chosen: list[int] = []
    for port in kept:
        if port is None:
            port = free_port(host)
            while port in taken:
                port = free_port(host)
        taken.add(port)
        chosen.append(port)
    return chosen


__all__ = [
    "SASL_MECHANISM",
    "KafkaCluster",
    "LocalCluster",
    "client_settings",
    "cluster_ports",
    "cluster_properties",
    "sasl_properties",
]
