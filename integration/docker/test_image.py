"""The worker image (docker/Dockerfile) runs a job, reports health, stops gracefully.

A job in the ``kstream:dev`` image on the host network, against the session's broker:
as a non-root user under tini; the HEALTHCHECK turns healthy once the worker runs its
tasks; ``docker stop`` (SIGTERM to the container) makes the worker take a final
checkpoint and exit 0. The checkpoint interval (120 s) is far longer than the test, so
the exactly-once output read afterwards comes from that final checkpoint alone: every
input record exactly once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

from integration.docker.engine import Containers, docker, images, inspect, metric_sum
from integration.e2e.harness import wait_until
from integration.edge_tools import read_all
from kstream.dev.jvm import free_port
from kstream.kafka.clients import TopicSpec, ensure_topics, make_admin, make_producer

N = 500
TOPOLOGY = """
from kstream.api import Topology

topology = Topology("upper")
topology.source({src!r}, value_serde="str").map(str.upper).to(
    {dst!r}, value_serde="str", guarantee="exactly_once"
)
"""


def test_worker_image_is_healthy_while_running_and_stops_gracefully_on_sigterm(
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    tmp_path: Path,
    containers: Containers,
) -> None:
    image = images()["IMAGE_KSTREAM"]
    src, dst, app = unique_name("in"), unique_name("out"), unique_name("app")
    ensure_topics(make_admin(kafka_bootstrap), [TopicSpec(src, 2), TopicSpec(dst, 2)])
    producer = make_producer(kafka_bootstrap)
    for i in range(N):
        producer.produce(src, f"r{i}".encode(), str(i).encode())
    assert producer.flush(30) == 0

    job = tmp_path / "job"
    (job / "store").mkdir(parents=True)
    (job / "upper.py").write_text(TOPOLOGY.format(src=src, dst=dst))
    job.chmod(0o755)
    (job / "store").chmod(0o777)  # the image runs as uid 10001
    port = free_port()
    name = containers.run(
        app, "--network", "host", "-e", f"KSTREAM_METRICS_PORT={port}",
        "-v", f"{job}:/job", image,
        "run", "/job/upper.py", "--bootstrap", kafka_bootstrap, "--app-id", app,
        "--interval", "120", "--store", "file:///job/store",
    )  # fmt: skip

    def health() -> str:
        state = inspect(name)["State"]
        return f"{state['Status']}/{state.get('Health', {}).get('Status')}"

    def logs() -> str:
        return f"{health()}; logs: {docker('logs', '--tail', '20', name, check=False)}"

    wait_until("container healthy", lambda: health() == "running/healthy", 120, logs)
    wait_until(
        f"all {N} input records read",
        lambda: metric_sum(port, "kstream_records_in_total") >= N,
        60,
        lambda: f"records_in {metric_sum(port, 'kstream_records_in_total')}; {logs()}",
    )
    config = inspect(name)["Config"]
    assert config["User"] == "kstream"
    assert config["Entrypoint"] == ["tini", "--", "kstream"]

    docker("stop", "-t", "60", name)  # SIGTERM to tini, which forwards it to kstream
    state = inspect(name)["State"]
    assert (state["Status"], state["ExitCode"], state["OOMKilled"]) == ("exited", 0, False), logs()
    out = Counter(r.value.decode() for r in read_all(kafka_bootstrap, dst) if r.value)
    assert out == Counter(f"R{i}" for i in range(N))
