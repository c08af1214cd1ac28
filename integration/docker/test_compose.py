"""docker/compose.yml for real: Kafka (KRaft), the S3 store, Prometheus and 3 workers
running the word-count job, with the images built here (compose.test.yml), on the
project's own network (created by ``up``, removed by ``down``).

While input flows, each phase does one disruption — none, ``docker kill`` of a worker
container, ``docker restart`` of the Kafka container, ``docker compose down`` / ``up``
keeping the volumes — and then the ``read_committed`` output must equal exactly the
counts of every window the phase's input closed, computed in plain Python
(``topologies/wordcount.py``'s ``expected_output``): nothing lost, nothing twice.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator

import pytest

from integration.docker.engine import REPO, Containers, docker, images
from integration.e2e.harness import wait_until
from integration.edge_tools import read_all
from kstream.kafka.clients import make_producer
from topologies.wordcount import WINDOW_MS, expected_output

T0 = 1_750_000_020_000 - 1_750_000_020_000 % WINDOW_MS
PHASE_MS = 3 * WINDOW_MS  # each phase's input fills three windows
LINES = 60  # per partition and phase
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
WORKERS = 3
Window = tuple[str, int, int]  # word, start, count


class Compose:
    """``docker-compose`` (Debian's 1.29) on docker/compose.yml + compose.test.yml."""

    def __init__(self, env: dict[str, str]) -> None:
        self.project = f"kstest{uuid.uuid4().hex[:8]}"
        self.env = env
        self.left_behind: list[str] = []  # anonymous volumes of containers already removed

    def __call__(self, *args: str, timeout: float = 300.0) -> str:
        cmd = ["docker-compose", "-p", self.project, "-f", str(REPO / "docker" / "compose.yml"),
               "-f", str(REPO / "integration" / "docker" / "compose.test.yml"), *args]  # fmt: skip
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, env=self.env, check=False
        )
        if proc.returncode != 0:
            raise RuntimeError(
                f"{' '.join(args)} failed ({proc.returncode}): {proc.stderr[-3000:]}"
            )
        return proc.stdout.strip()

    def up(self) -> None:
        self("up", "-d", "--scale", f"worker={WORKERS}",
             "kafka", "minio", "bucket", "seed", "worker", "prometheus")  # fmt: skip

    def anonymous_volumes(self) -> list[str]:
        """The unnamed volumes of the project's containers (the images' VOLUMEs), which a
        ``down`` without ``-v`` leaves behind."""
        ids = docker("ps", "-aq", "--filter", f"label=com.docker.compose.project={self.project}")
        if not ids:
            return []
        lines = docker("inspect", "-f", "{{json .Mounts}}", *ids.split()).splitlines()
        return [
            m["Name"]
            for line in lines
            for m in json.loads(line)
            if m["Type"] == "volume" and not m["Name"].startswith(self.project)
        ]

    def container(self, service: str, index: int = 1) -> str:
        return f"{self.project}_{service}_{index}"


def free_subnet() -> tuple[str, str]:
    """A /24 in 172.29.0.0/16 that no address or route of this machine uses, and the
    address Kafka gets in it."""
    used = subprocess.run(["ip", "-4", "route"], capture_output=True, text=True).stdout
    for third in random.sample(range(256), 256):
        if f"172.29.{third}." not in used:
            return f"172.29.{third}.0/24", f"172.29.{third}.10"
    raise RuntimeError("no free /24 in 172.29.0.0/16 for the compose project's network")


@pytest.fixture
def compose(containers: Containers) -> Iterator[Compose]:
    subnet, kafka_ip = free_subnet()
    c = Compose({**os.environ, **images(), "KS_SUBNET": subnet, "KS_KAFKA_IP": kafka_ip})
    try:
        yield c
    finally:
        c("down", "-v", "--remove-orphans", "-t", "5", timeout=180)
        for volume in c.left_behind:
            docker("volume", "rm", volume, check=False)


def phase_input(phase: int, rng: random.Random) -> dict[int, list[tuple[str, int]]]:
    """Per partition: lines (text, timestamp) in event-time order, filling the phase's
    three windows, then one line 10 s after them, which closes them (watermark: max
    timestamp - 5 s) and opens the next phase's first window."""
    start = T0 + phase * PHASE_MS
    out: dict[int, list[tuple[str, int]]] = {}
    for p in range(3):
        lines = [
            (" ".join(rng.choices(WORDS, k=rng.randint(1, 6))), start + i * PHASE_MS // LINES + p)
            for i in range(LINES)
        ]
        out[p] = [*lines, ("tick", start + PHASE_MS + 10_000)]
    return out


def test_wordcount_on_compose_survives_worker_kill_kafka_restart_and_down_up(
    compose: Compose,
) -> None:
    bootstrap = f"{compose.env['KS_KAFKA_IP']}:9092"
    rng = random.Random(40)
    sent: list[tuple[None, str, int]] = []

    def produce(batch: list[tuple[int, str, int]]) -> None:
        producer = make_producer(bootstrap)
        for partition, line, ts in batch:
            producer.produce("lines", line.encode(), partition=partition, timestamp=ts)
            sent.append((None, line, ts))
        assert producer.flush(120) == 0

    def output() -> Counter[Window]:
        return Counter(
            (v["word"], v["start"], v["count"])
            for r in read_all(bootstrap, "word-counts")
            if r.value and (v := json.loads(r.value))
        )

    def expected(closed_before: int) -> Counter[Window]:
        rows = expected_output({"lines": sent})
        return Counter(
            (r["word"], r["start"], r["count"]) for r in rows if r["end"] <= closed_before
        )

    def run_phase(phase: int, disruption: Callable[[], None]) -> None:
        lines = phase_input(phase, rng)
        batch = [(p, text, ts) for p in range(3) for text, ts in lines[p]]
        half = [b for b in batch if b[2] < T0 + phase * PHASE_MS + PHASE_MS // 2]
        produce(half)
        disruption()
        produce([b for b in batch if b not in half])
        want = expected(T0 + (phase + 1) * PHASE_MS)
        wait_until(
            f"phase {phase}: the output equals the expected counts ({sum(want.values())} windows)",
            lambda: output() == want,
            240,
            lambda: f"missing {want - output()}, unexpected {output() - want}",
        )
        print(f"phase {phase}: {len(sent)} lines in, {sum(want.values())} window counts out, exact")

    compose.up()
    wait_until("Kafka in the compose project is healthy", lambda: docker(
        "inspect", "-f", "{{.State.Health.Status}}", compose.container("kafka")) == "healthy",
        120, lambda: docker("logs", "--tail", "10", compose.container("kafka"), check=False))  # fmt: skip
    run_phase(0, lambda: None)

    def targets_up() -> float:
        url = "http://127.0.0.1:9090/api/v1/query?query=sum(up)"  # published by compose.yml
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                result = json.loads(r.read())["data"]["result"]
        except OSError:
            return -1
        return float(result[0]["value"][1]) if result else 0

    wait_until("Prometheus scrapes the 3 workers", lambda: targets_up() == WORKERS, 60,
               lambda: f"sum(up) = {targets_up()}")  # fmt: skip

    def kill_worker() -> None:
        docker("kill", compose.container("worker", 2))

    def restart_kafka() -> None:
        docker("restart", "-t", "10", compose.container("kafka"))

    run_phase(1, kill_worker)
    run_phase(2, restart_kafka)

    def down_up() -> None:
        compose.left_behind += compose.anonymous_volumes()
        compose("down", "-t", "30")  # keeps the volumes: Kafka's data, the checkpoints
        compose.up()

    run_phase(3, down_up)
