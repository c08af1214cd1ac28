"""A three-node KRaft cluster in containers started by testcontainers
(``KSTREAM_TEST_KAFKA=testcontainers``; the ``kafka_cluster`` fixture).

The same cluster as :class:`kstream.dev.localcluster.LocalCluster` (each node broker
and controller, the quorum of all nodes, internal topics at replication N and min ISR
N-1, a SASL_PLAINTEXT listener, small heaps and the quick compiler only), its nodes
being containers of the locally built Kafka image (``integration/docker/kafka_container.py``'s
``IMAGE``) on the host network, on distinct free loopback ports. The settings are
LocalCluster's own, given to the image as ``KAFKA_*`` variables (docker/kafka/run.sh).

A crash is ``docker kill`` (SIGKILL), a controlled shutdown ``docker stop``; a restart
starts the same container again, so the node keeps its data (the image's volume) and
its ports. The containers and their volumes are removed by :meth:`remove`.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from kstream.dev.jvm import port_open
from kstream.dev.localbroker import (
    KAFKA_VERSION,
    LocalBrokerError,
    broker_properties,
    new_cluster_id,
)
from kstream.dev.localcluster import (
    KafkaCluster,
    cluster_properties,
    distinct_ports,
    sasl_properties,
)
from kstream.kafka.clients import KafkaException, make_admin

if TYPE_CHECKING:
    from testcontainers.core.container import DockerContainer

DATA = "/var/lib/kafka/data"  # the image's volume


def kafka_env(props: Mapping[str, str]) -> dict[str, str]:
    """server.properties entries as the image's ``KAFKA_*`` variables (``.`` -> ``_``,
    ``_`` -> ``__``, ``-`` -> ``___``, upper case; docker/kafka/run.sh reverses it)."""
    env = {}
    for key, value in props.items():
        name = key.replace("_", "__").replace("-", "___").replace(".", "_").upper()
        if property_name(name) != key:
            raise ValueError(f"property {key!r} has no unambiguous KAFKA_* name")
        env[f"KAFKA_{name}"] = value
    return env


def property_name(name: str) -> str:
    """The property a ``KAFKA_`` variable's rest names, by docker/kafka/run.sh's rule."""
    key = name.lower().replace("___", "-").replace("__", "@").replace("_", ".")
    return key.replace("@", "_")


def node_properties(
    index: int, ports: list[int], controllers: list[int], sasl: list[int], users: Mapping[str, str]
) -> dict[str, str]:
    """Node ``index``'s server.properties: LocalCluster's settings, data on the volume."""
    host, size = "127.0.0.1", len(ports)
    voters = ",".join(f"{i + 1}@{host}:{p}" for i, p in enumerate(controllers))
    props = broker_properties(Path(DATA), ports[index], controllers[index], host)
    props |= cluster_properties(index + 1, voters, size)
    if users:
        props |= sasl_properties(host, ports[index], sasl[index], controllers[index], users)
    props["log.dirs"] = DATA
    return props


class ContainerCluster(KafkaCluster):
    """``size`` Kafka containers (``image``) forming one KRaft cluster on loopback."""

    def __init__(
        self,
        image: str,
        *,
        size: int = 3,
        heap: str = "320m",
        sasl_users: Mapping[str, str] | None = None,
        start_timeout: float = 180.0,
    ) -> None:
        self.image = image
        self.host = "127.0.0.1"
        self.size = size
        self.heap = heap
        self.sasl_users = dict(sasl_users or {})
        self.start_timeout = start_timeout
        ports = distinct_ports(self.host, 3 * size)
        self.ports = ports[:size]
        self.controller_ports = ports[size : 2 * size]
        self.sasl_ports = ports[2 * size :] if self.sasl_users else []
        self.cluster_id = new_cluster_id()
        self.name = f"kstream-test-kafka-{uuid.uuid4().hex[:8]}"
        self.containers: list[DockerContainer] = []

    @property
    def kafka_version(self) -> str:
        return KAFKA_VERSION

    def container_name(self, index: int) -> str:
        return f"{self.name}-{index + 1}"

    def _create(self, index: int) -> DockerContainer:
        os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
        from testcontainers.core.container import DockerContainer

        props = node_properties(
            index, self.ports, self.controller_ports, self.sasl_ports, self.sasl_users
        )
        env = {
            **kafka_env(props),
            "CLUSTER_ID": self.cluster_id,
            "KAFKA_HEALTH_PORT": str(self.ports[index]),
            "KAFKA_HEAP_OPTS": f"-Xms{self.heap} -Xmx{self.heap}",
            # N JVMs on a small machine: the quick compiler only (as LocalCluster).
            "KAFKA_OPTS": "-XX:TieredStopAtLevel=1 -XX:CICompilerCount=1",
        }
        container = (
            DockerContainer(self.image)
            .with_name(self.container_name(index))
            .with_kwargs(network_mode="host")
        )
        for name, value in env.items():
            container = container.with_env(name, value)
        return container.start()

    # ---- the nodes

    def start(self) -> str:
        """Create (first start) or start again every node; the bootstrap once all answer."""
        try:
            if not self.containers:
                self.containers = [self._create(i) for i in range(self.size)]
            else:
                for i in range(self.size):
                    if i not in self.running():
                        self.containers[i].get_wrapped_container().start()
            for i in range(self.size):
                self._wait_node(i)
            self.wait_brokers(self.size, self.start_timeout)
        except BaseException:
            self.remove()
            raise
        return self.bootstrap

    def stop(self) -> None:
        for i in self.running():
            self.stop_node(i)

    def kill(self, index: int) -> None:
        """``docker kill`` (SIGKILL) of node ``index``: a crash."""
        wrapped = self.containers[index].get_wrapped_container()
        wrapped.reload()
        if wrapped.status == "running":
            wrapped.kill()
        self._wait_status(index, running=False, timeout=30.0)

    def stop_node(self, index: int, timeout: float = 60.0) -> None:
        """``docker stop`` (SIGTERM, SIGKILL after ``timeout``) of node ``index``."""
        self.containers[index].get_wrapped_container().stop(timeout=int(timeout))
        self._wait_status(index, running=False, timeout=30.0)

    def start_node(self, index: int) -> None:
        """Start node ``index``'s container again (same data and ports); wait until it answers."""
        self.containers[index].get_wrapped_container().start()
        self._wait_node(index)

    def running(self) -> list[int]:
        out = []
        for i, c in enumerate(self.containers):
            wrapped = c.get_wrapped_container()
            wrapped.reload()
            if wrapped.status == "running":
                out.append(i)
        return out

    def remove(self) -> None:
        """Remove every container and its volume (throw-away data: no controlled shutdown)."""
        for c in self.containers:
            c.stop()  # testcontainers: docker rm -f -v
        self.containers = []

    # ---- waiting

    def _wait_status(self, index: int, *, running: bool, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while (index in self.running()) != running:
            if time.monotonic() > deadline:
                raise LocalBrokerError(
                    f"{self.container_name(index)} still {'stopped' if running else 'running'} "
                    f"after {timeout}s"
                )
            time.sleep(0.2)

    def _wait_node(self, index: int) -> None:
        """Until node ``index`` answers a metadata request; its log tail if it exits."""
        address = f"{self.host}:{self.ports[index]}"
        admin = make_admin(address, {"log_level": 0})
        deadline = time.monotonic() + self.start_timeout
        while True:
            if index not in self.running():
                raise LocalBrokerError(
                    f"Kafka container {self.container_name(index)} exited:\n{self._log_tail(index)}"
                )
            if port_open(self.host, self.ports[index]):
                try:
                    if admin.list_topics(timeout=1.0).brokers:
                        return
                except KafkaException:
                    pass  # listening but not serving metadata yet
            if time.monotonic() > deadline:
                raise LocalBrokerError(
                    f"Kafka container {self.container_name(index)} did not answer at {address} "
                    f"within {self.start_timeout}s:\n{self._log_tail(index)}"
                )
            time.sleep(0.2)

    def _log_tail(self, index: int, lines: int = 25) -> str:
        logs = self.containers[index].get_wrapped_container().logs(tail=lines)
        return bytes(logs).decode(errors="replace")


__all__ = ["ContainerCluster", "kafka_env", "node_properties", "property_name"]
