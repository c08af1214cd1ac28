"""The testcontainers cluster's nodes (integration/docker/kafka_cluster.py) get the local
cluster's settings, as the Kafka image's KAFKA_* variables (no Docker needed here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from integration.docker.kafka_cluster import (
    ContainerCluster,
    kafka_env,
    node_properties,
    property_name,
)
from kstream.dev.localbroker import broker_properties
from kstream.dev.localcluster import LocalCluster


def test_each_node_gets_the_local_clusters_settings_with_its_data_on_the_volume(
    tmp_path: Path,
) -> None:
    users = {"alice": "s3cret"}
    cluster = ContainerCluster("kstream-test/kafka:x", size=3, sasl_users=users)
    local = LocalCluster(tmp_path, size=3, sasl_users=users)
    ports = cluster.ports + cluster.controller_ports + cluster.sasl_ports
    assert len(set(ports)) == 9
    for i, node in enumerate(local.nodes):
        # Given the local node's ports: exactly its server.properties, data on the volume.
        same_ports = node_properties(
            i, local.ports, local.controller_ports, local.sasl_ports, users
        )
        local_props = broker_properties(Path("/data"), local.ports[i], local.controller_ports[i])
        assert same_ports == local_props | node.overrides | {"log.dirs": "/var/lib/kafka/data"}
        props = node_properties(
            i, cluster.ports, cluster.controller_ports, cluster.sasl_ports, users
        )
        assert props["log.dirs"] == "/var/lib/kafka/data"
        assert props["node.id"] == str(i + 1)
        assert props["min.insync.replicas"] == "2"
        assert props["default.replication.factor"] == "3"
        assert props["transaction.state.log.min.isr"] == "2"
        assert props["controller.quorum.voters"] == ",".join(
            f"{n + 1}@127.0.0.1:{p}" for n, p in enumerate(cluster.controller_ports)
        )
        env = kafka_env(props)
        assert {property_name(k.removeprefix("KAFKA_")): v for k, v in env.items()} == props
    assert env["KAFKA_LISTENER_NAME_SASL__PLAINTEXT_PLAIN_SASL_JAAS_CONFIG"].endswith(
        'user_alice="s3cret";'
    )
    assert cluster.bootstrap.count(",") == 2 and cluster.sasl_bootstrap.count(",") == 2


def test_a_property_without_an_unambiguous_variable_name_is_refused() -> None:
    assert kafka_env({"log.cleaner.io-max": "1"}) == {"KAFKA_LOG_CLEANER_IO___MAX": "1"}
    with pytest.raises(ValueError, match=r"'a_\.b'"):
        kafka_env({"a_.b": "1"})
