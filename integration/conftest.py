"""The Kafka broker integration tests run against, chosen once per session.

Order: an existing cluster named by ``KSTREAM_TEST_BOOTSTRAP``; else what
``KSTREAM_TEST_KAFKA`` says: ``local`` (the default) kstream's local broker (Java 17+,
see ``kstream.dev.localbroker``), ``testcontainers`` a broker container started by
testcontainers (``integration/docker/kafka_container.py``; ``make docker-test``), or a
bootstrap address of an existing cluster. The presence of Docker alone changes nothing.
With ``CI=true`` a broker (or S3 server, or capability) that cannot be had fails the
run, and any skip of an integration test is reported as a failure; elsewhere the
integration tests are skipped with the reason.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from integration.ci import pytest_make_collect_report as pytest_make_collect_report
from integration.ci import pytest_runtest_makereport as pytest_runtest_makereport
from integration.ci import unavailable
from integration.s3server import S3Server
from kstream.dev.localbroker import KAFKA_VERSION, LocalBroker, LocalBrokerError
from kstream.dev.localcluster import KafkaCluster, LocalCluster
from kstream.dev.s3proxy import S3ProxyError
from kstream.kafka.clients import AdminClient, KafkaException, make_admin

_broker_source: list[str] = []  # what ran, for the terminal summary


def _docker_answers(timeout: float = 1.0) -> bool:
    """Whether a Docker engine answers ``GET /_ping`` on its unix socket (cheap, bounded)."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        return False  # remote engines: opt in via KSTREAM_TEST_BOOTSTRAP instead
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(host.removeprefix("unix://"))
            s.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            status_line = s.recv(64).split(b"\r\n", 1)[0]
            return status_line.startswith(b"HTTP/1.") and b" 200" in status_line
    except OSError:
        return False


def _check_reachable(bootstrap: str, timeout: float = 10.0) -> None:
    md = make_admin(bootstrap).list_topics(timeout=timeout)
    if not md.brokers:
        raise KafkaException(f"no brokers in metadata from {bootstrap}")


def _announce(config: pytest.Config, line: str) -> None:
    _broker_source.append(line)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"\nkstream integration: {line}")


@pytest.fixture(scope="session")
def s3_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[S3Server]:
    """A real S3-compatible server (S3Proxy via ``kstream.dev.s3proxy``) for the session.

    Tests that stop it (an outage) must start it again before they end."""
    server = S3Server(tmp_path_factory.mktemp("s3"))
    try:
        server.start()
    except (S3ProxyError, RuntimeError) as e:
        unavailable("no S3 server for integration tests", f"S3Proxy could not start: {e}")
    _announce(request.config, f"S3Proxy at {server.endpoint}, buckets {server.bucket_dir.parent}")
    try:
        yield server
    finally:
        server.stop()


def _no_broker(reason: str) -> NoReturn:
    unavailable("no Kafka broker for integration tests", reason)


@pytest.fixture(scope="session")
def kafka_bootstrap(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """Bootstrap address of a real Kafka broker, started for the session if needed."""
    external = os.environ.get("KSTREAM_TEST_BOOTSTRAP")
    if external:
        try:
            _check_reachable(external)
        except KafkaException as e:
            _no_broker(f"KSTREAM_TEST_BOOTSTRAP={external} does not answer: {e}")
        _announce(request.config, f"existing Kafka cluster at {external} (KSTREAM_TEST_BOOTSTRAP)")
        yield external
        return

    choice = os.environ.get("KSTREAM_TEST_KAFKA", "local")
    if choice == "testcontainers":
        from integration.docker.kafka_container import IMAGE, kafka_container

        if not _docker_answers():
            _no_broker(
                "KSTREAM_TEST_KAFKA=testcontainers but no Docker engine answers at "
                f"{os.environ.get('DOCKER_HOST', 'unix:///var/run/docker.sock')} "
                "(make docker-test starts one)"
            )
        with kafka_container() as bootstrap:
            _wait_reachable(bootstrap, 120.0)
            _announce(
                request.config,
                f"Kafka {KAFKA_VERSION} in Docker via testcontainers ({IMAGE}) at {bootstrap}",
            )
            yield bootstrap
        return
    if choice != "local":
        try:
            _check_reachable(choice)
        except KafkaException as e:
            _no_broker(f"KSTREAM_TEST_KAFKA={choice} does not answer: {e}")
        _announce(request.config, f"existing Kafka cluster at {choice} (KSTREAM_TEST_KAFKA)")
        yield choice
        return

    data_dir: Path = tmp_path_factory.mktemp("kafka")
    broker = LocalBroker(data_dir)
    try:
        broker.start()
    except LocalBrokerError as e:
        _no_broker(f"local broker could not start: {e}")
    _announce(
        request.config,
        f"Kafka {broker.kafka_version} local broker (kstream.dev.localbroker, jars {broker.libs}) "
        f"at {broker.bootstrap}, pid {broker.pid}, log {broker.log_file}",
    )
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


SASL_USER = "kstream_test"


@pytest.fixture(scope="session")
def sasl_user() -> tuple[str, str]:
    """(user, password) of the SASL/PLAIN listener of ``kafka_cluster``."""
    return SASL_USER, f"pw-{uuid.uuid4().hex}"


@pytest.fixture(scope="session")
def kafka_cluster(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    sasl_user: tuple[str, str],
) -> Iterator[KafkaCluster]:
    """A real three-node KRaft cluster (one per session), each node with a plain and a
    SASL_PLAINTEXT (PLAIN, ``sasl_user``) listener: from the project's launcher, or with
    ``KSTREAM_TEST_KAFKA=testcontainers`` three containers of the locally built Kafka
    image (``integration/docker/kafka_cluster.py``), the same settings either way.

    Tests that fail brokers must leave every node running (and in sync) when done.
    """
    user, password = sasl_user
    if os.environ.get("KSTREAM_TEST_KAFKA") == "testcontainers":
        yield from _container_cluster(request.config, {user: password})
        return
    cluster = LocalCluster(
        tmp_path_factory.mktemp("kafka-cluster"), size=3, sasl_users={user: password}
    )
    try:
        cluster.start()
    except LocalBrokerError as e:
        _no_broker(f"local 3-node cluster could not start: {e}")
    _announce(
        request.config,
        f"Kafka {cluster.kafka_version} 3-node cluster (kstream.dev.localcluster) at "
        f"{cluster.bootstrap}, SASL at {cluster.sasl_bootstrap}, data {cluster.data_dir}",
    )
    try:
        yield cluster
    finally:
        for node in range(cluster.size):  # throw-away data: no controlled shutdown
            cluster.kill(node)


def _container_cluster(config: pytest.Config, users: dict[str, str]) -> Iterator[KafkaCluster]:
    from integration.docker.kafka_cluster import ContainerCluster
    from integration.docker.kafka_container import IMAGE

    if not _docker_answers():
        _no_broker(
            "KSTREAM_TEST_KAFKA=testcontainers but no Docker engine answers at "
            f"{os.environ.get('DOCKER_HOST', 'unix:///var/run/docker.sock')} "
            "(make docker-test starts one)"
        )
    cluster = ContainerCluster(IMAGE, size=3, sasl_users=users)
    try:
        cluster.start()
    except LocalBrokerError as e:
        _no_broker(f"3-node cluster in containers could not start: {e}")
    _announce(
        config,
        f"Kafka {cluster.kafka_version} 3-node cluster in Docker via testcontainers ({IMAGE}, "
        f"containers {cluster.name}-1..3) at {cluster.bootstrap}, SASL at {cluster.sasl_bootstrap}",
    )
    try:
        yield cluster
    finally:
        cluster.remove()


def _wait_reachable(bootstrap: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            _check_reachable(bootstrap, timeout=2.0)
            return
        except KafkaException:
            if time.monotonic() > deadline:
                raise


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Repeat which Kafka ran, so the end of a CI log says it too."""
    for line in _broker_source:
        terminalreporter.write_line(f"kstream integration broker: {line}")


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """``unique_name("orders")`` -> ``"orders-<test>-<8 hex>"``: fresh topic / app id names."""
    test = request.node.name.replace("[", "-").replace("]", "").replace("_", "-")[:40]

    def make(prefix: str) -> str:
        return f"{prefix}-{test}-{uuid.uuid4().hex[:8]}"

    return make


@pytest.fixture
def kafka_admin(kafka_bootstrap: str) -> AdminClient:
    """An admin client on the session's broker."""
    return make_admin(kafka_bootstrap)
