"""The local cluster's configuration (no JVM): quorum, replication, the SASL listener."""

from __future__ import annotations

from pathlib import Path

import javaproperties
import pytest

from kstream.dev.localbroker import BrokerRecord, LocalBrokerError
from kstream.dev.localcluster import LocalCluster, cluster_properties, sasl_properties


def test_three_nodes_form_one_quorum_with_replicated_internal_topics(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, size=3, sasl_users={"alice": "s3cret"})
    voters = {n.overrides["controller.quorum.voters"] for n in cluster.nodes}
    assert len(voters) == 1
    (line,) = voters
    assert line == ",".join(
        f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(cluster.controller_ports)
    )
    ports = cluster.ports + cluster.controller_ports + cluster.sasl_ports
    assert len(set(ports)) == 9
    assert {n.cluster_id for n in cluster.nodes} == {cluster.nodes[0].cluster_id}
    for i, node in enumerate(cluster.nodes):
        o = node.overrides
        assert o["node.id"] == str(i + 1)
        assert o["default.replication.factor"] == "3"
        assert o["offsets.topic.replication.factor"] == "3"
        assert o["transaction.state.log.replication.factor"] == "3"
        assert o["transaction.state.log.min.isr"] == "2"
        assert o["min.insync.replicas"] == "2"
        assert o["listeners"] == (
            f"PLAINTEXT://127.0.0.1:{cluster.ports[i]},"
            f"SASL_PLAINTEXT://127.0.0.1:{cluster.sasl_ports[i]},"
            f"CONTROLLER://127.0.0.1:{cluster.controller_ports[i]}"
        )
    assert cluster.bootstrap.count(",") == 2 and cluster.sasl_bootstrap.count(",") == 2


def test_the_sasl_listener_has_its_users_in_the_brokers_jaas_line() -> None:
    props = sasl_properties("127.0.0.1", 1, 2, 3, {"alice": "a-pw", "bob": "b-pw"})
    assert props["sasl.enabled.mechanisms"] == "PLAIN"
    assert props["listener.name.sasl_plaintext.plain.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'user_alice="a-pw" user_bob="b-pw";'
    )
    assert "SASL_PLAINTEXT:SASL_PLAINTEXT" in props["listener.security.protocol.map"]
    with pytest.raises(LocalBrokerError):
        sasl_properties("127.0.0.1", 1, 2, 3, {"alice": 'quote"d'})


def test_client_properties_read_back_by_the_cli(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, size=1, sasl_users={"kstream": "pw"})
    text = cluster.client_properties("kstream")
    assert javaproperties.loads(text) == {
        "bootstrap.servers": cluster.sasl_bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "kstream",
        "sasl.password": "pw",
    }
    assert cluster.nodes[0].overrides.get("node.id") is None  # one node: single-node config


def test_a_cluster_record_lists_every_pid(tmp_path: Path) -> None:
    rec = BrokerRecord("h:1,h:2", 10, str(tmp_path), "log", "4.1.1", more_pids=(11, 12))
    rec.write(tmp_path)
    back = BrokerRecord.read(tmp_path)
    assert back == rec and back.pids == (10, 11, 12)
    assert cluster_properties(2, "v", 3)["min.insync.replicas"] == "2"


def test_a_cluster_started_again_on_its_data_keeps_its_ports(tmp_path: Path) -> None:
    """`kstream dev kafka start --brokers 3` after a stop picked new ports, unlike one
    broker: saved bootstraps broke. Each node's last configuration now gives its ports."""
    first = LocalCluster(tmp_path, size=3, sasl_users={"alice": "pw"})
    for node in first.nodes:
        node.write_config()  # what each node's start leaves in its data directory
    again = LocalCluster(tmp_path, size=3, sasl_users={"alice": "pw"})
    assert (again.ports, again.controller_ports, again.sasl_ports) == (
        first.ports,
        first.controller_ports,
        first.sasl_ports,
    )
    assert again.bootstrap == first.bootstrap
    plain = LocalCluster(tmp_path, size=3)  # without SASL: the plain and controller ports
    assert (plain.ports, plain.controller_ports, plain.sasl_ports) == (
        first.ports,
        first.controller_ports,
        [],
    )


def test_a_node_without_a_previous_configuration_gets_free_distinct_ports(
    tmp_path: Path,
) -> None:
    first = LocalCluster(tmp_path, size=3)
    first.nodes[0].write_config()
    again = LocalCluster(tmp_path, size=3, sasl_users={"alice": "pw"})
    assert (again.ports[0], again.controller_ports[0]) == (
        first.ports[0],
        first.controller_ports[0],
    )
    ports = again.ports + again.controller_ports + again.sasl_ports
    assert len(set(ports)) == 9
