"""Graceful stops on a real broker: the final checkpoint commits every output, once.

The checkpoint interval is 120 s, far longer than the test: any exactly-once output
seen comes from a checkpoint the worker requested when it stopped (SIGTERM) or went
idle (``--stop-when-idle``), never from the periodic trigger.
"""

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
topology.source({src!r}, value_serde="str").map(str.upper).to(
    {dst!r}, value_serde="str", guarantee="exactly_once"
)
"""


def test_sigterm_and_idle_stops_commit_their_output_exactly_once(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    src, dst, app = unique_name("in"), unique_name("out"), unique_name("app")
    ensure_topics(make_admin(kafka_bootstrap), [TopicSpec(src, 2), TopicSpec(dst, 2)])
    topology = tmp_path / "upper.py"
    topology.write_text(TOPOLOGY.format(src=src, dst=dst))
    producer = make_producer(kafka_bootstrap)

    def produce(lo: int, hi: int) -> None:
        for i in range(lo, hi):
            producer.produce(src, f"r{i}".encode(), str(i).encode())
        assert producer.flush(30) == 0

    def run(name: str, *extra: str) -> tuple[subprocess.Popen[bytes], Path]:
        log = tmp_path / f"{name}.log"
        proc = subprocess.Popen(
            [*CLI, "-v", "run", str(topology), "--bootstrap", kafka_bootstrap, "--app-id", app,
             "--interval", "120", "--store", f"file://{tmp_path}/store",
             "--state-dir", str(tmp_path / "state"), *extra],
            stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=REPO,
        )  # fmt: skip
        return proc, log

    def outputs() -> Counter[str]:
        return Counter(r.value.decode() for r in read_all(kafka_bootstrap, dst) if r.value)

    # 1. Idle stop: everything produced before the start is read, then the worker
    #    asks for a checkpoint at once instead of waiting 120 s for the interval.
    produce(0, 500)
    first, log1 = run("idle", "--stop-when-idle", "2")
    assert first.wait(timeout=60) == 0, log1.read_text()[-3000:]
    assert outputs() == Counter(f"R{i}" for i in range(500))

    # 2. SIGTERM: input stops being read, a final checkpoint publishes what was read.
    second, log2 = run("sigterm")
    deadline = time.monotonic() + 60
    while "resumed: running" not in log2.read_text():
        assert second.poll() is None, log2.read_text()[-3000:]
        assert time.monotonic() < deadline, "the job did not resume in 60 s"
        time.sleep(0.2)
    produce(500, 800)
    time.sleep(3)  # let it read them (the assertions below hold whatever it read)
    second.send_signal(signal.SIGTERM)
    assert second.wait(timeout=60) == 0, log2.read_text()[-3000:]
    text = log2.read_text()
    assert "stopping: the final checkpoint completed" in text, text[-3000:]
    after_stop = outputs()
    assert max(after_stop.values()) == 1  # nothing doubled
    published = sum(after_stop.values()) - 500
    assert 0 < published <= 300, published  # the final checkpoint published them

    # 3. The next run continues after the final checkpoint: no record twice, none lost.
    third, log3 = run("rest", "--stop-when-idle", "2")
    assert third.wait(timeout=60) == 0, log3.read_text()[-3000:]
    assert outputs() == Counter(f"R{i}" for i in range(800))
