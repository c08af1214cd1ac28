"""Kafka in a container started by testcontainers (``KSTREAM_TEST_KAFKA=testcontainers``).

The image is ``KSTREAM_TEST_KAFKA_IMAGE`` (default ``kstream-test/kafka:<version>``, built
here by ``scripts/docker/build-images.sh`` from the jars kstream resolves, since no
registry may answer; ``apache/kafka:<version>`` takes the same settings). The container
runs on the host network, listening on free loopback ports, so no container network
is needed. testcontainers' reaper (Ryuk) is an image that may not be pullable: it is
disabled unless ``TESTCONTAINERS_RYUK_DISABLED`` says otherwise, and the container is
removed when the context ends.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from kstream.dev.jvm import free_port
from kstream.dev.localbroker import KAFKA_VERSION

IMAGE = os.environ.get("KSTREAM_TEST_KAFKA_IMAGE", f"kstream-test/kafka:{KAFKA_VERSION}")


@contextmanager
def kafka_container() -> Iterator[str]:
    """A single-node KRaft broker in a container; yields its bootstrap address."""
    os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
    from testcontainers.core.container import DockerContainer

    port, controller = free_port(), free_port()
    while controller == port:
        controller = free_port()
    settings = {
        "KAFKA_NODE_ID": "1",
        "KAFKA_PROCESS_ROLES": "broker,controller",
        "KAFKA_LISTENERS": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}",
        "KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://127.0.0.1:{port}",
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": f"1@127.0.0.1:{controller}",
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
        "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
        "KAFKA_HEALTH_PORT": str(port),
        # Tests write synthetic event times far in the past: keep records regardless.
        "KAFKA_LOG_RETENTION_MS": "-1",
    }
    container = DockerContainer(IMAGE).with_kwargs(network_mode="host")
    for name, value in settings.items():
        container = container.with_env(name, value)
    container.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        container.stop()  # stop() removes the container (and its anonymous volume)
