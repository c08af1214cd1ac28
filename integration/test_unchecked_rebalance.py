"""Checkpointing off: rebalances and kill -9 lose nothing (at-least-once on committed offsets)."""

from __future__ import annotations

import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from integration.cli_job import CLI
from integration.e2e.harness import REPO
from integration.edge_tools import read_all
from kstream.kafka.clients import TopicSpec, ensure_topics, make_admin, make_producer

TOPOLOGY = """
from kstream.api import Topology

topology = Topology("upper")
topology.source({src!r}, value_serde="str").map(str.upper).to({dst!r}, value_serde="str")
"""


def test_rebalances_and_a_killed_worker_lose_no_record(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    src, dst, app = unique_name("in"), unique_name("out"), unique_name("app")
    ensure_topics(make_admin(kafka_bootstrap), [TopicSpec(src, 4), TopicSpec(dst, 4)])
    topology = tmp_path / "upper.py"
    topology.write_text(TOPOLOGY.format(src=src, dst=dst))

    def worker(name: str) -> subprocess.Popen[bytes]:
        log = open(tmp_path / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        return subprocess.Popen(
            [*CLI, "-v", "worker", str(topology), "--bootstrap", kafka_bootstrap,
             "--app-id", app, "--no-checkpointing", "--session-timeout", "6",
             "--state-dir", str(tmp_path / name), "--stop-when-idle", "12"],
            stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
        )  # fmt: skip

    def joined(name: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while "assignment changed" not in (tmp_path / f"{name}.log").read_text():
            assert time.monotonic() < deadline, f"{name} did not join the group in {timeout}s"
            time.sleep(0.2)

    p = make_producer(kafka_bootstrap)
    sent = [f"record-{i}" for i in range(6000)]

    def produce(lo: int, hi: int) -> None:
        for i in range(lo, hi):
            p.produce(src, sent[i].encode(), str(i).encode())
            if i % 100 == 0:
                p.poll(0)
                time.sleep(0.02)
        assert p.flush(30) == 0

    first = worker("w1")
    joined("w1")
    produce(0, 2000)
    second = worker("w2")  # a rebalance with both members alive, input flowing
    produce(2000, 3000)
    joined("w2")
    produce(3000, 4000)
    first.send_signal(signal.SIGKILL)  # a worker lost without warning
    third = worker("w3")
    produce(4000, 6000)
    for name, proc in (("w2", second), ("w3", third)):
        assert proc.wait(timeout=120) == 0, (tmp_path / f"{name}.log").read_text()[-3000:]
    w1_log = (tmp_path / "w1.log").read_text()
    assert w1_log.count("assignment changed") >= 2, "w1 never took part in a rebalance"

    got = Counter(r.value.decode() for r in read_all(kafka_bootstrap, dst) if r.value)
    expected = Counter(v.upper() for v in sent)
    lost = expected - got
    unexpected = set(got) - set(expected)
    duplicates = sum((got - expected).values())
    print(f"checkpointing off: {len(sent)} records, lost {sum(lost.values())}, "
          f"duplicated {duplicates} (at-least-once allows duplicates)")  # fmt: skip
    assert not lost, f"lost {sum(lost.values())} records, e.g. {list(lost)[:5]}"
    assert not unexpected
