"""kill -9 of a worker in a job without a shuffle, on a real broker (docs/design.md §6.7).

Three ``kstream worker`` processes and a ``kstream coordinator`` run a job whose tasks
exchange no records (source -> peek -> map -> exactly-once sink), fed 150 records a
second throughout. One worker is killed (SIGKILL). The coordinator carries its tasks at
their last completed snapshot, so checkpoints keep completing with the other two; before
the dead worker is lost it triggers a hold checkpoint, and the group's change is a
hand-over at it: the two survivors carry on where they held and process nothing twice
(each process notes every record its ``peek`` saw), only the dead worker's tasks are
restored. The output is exact: every record once. Before, the kill rolled every task
back to the latest completed checkpoint and the survivors processed that interval again.
"""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from integration.cli_job import CLI, CliJob
from integration.edge_tools import read_all
from kstream.kafka.clients import TopicSpec, ensure_topics, make_admin, make_producer

WORKERS = 3
PARTITIONS = 6
RATE = 150  # records a second

TOPOLOGY = """
import os

from kstream.api import Topology


def seen(value):
    with open(os.path.join({seen!r}, f"seen-{{os.getpid()}}"), "a") as f:
        f.write(value + "\\n")


topology = Topology("carry")
topology.source({src!r}, value_serde="str").peek(seen).map(str.upper).to(
    {dst!r}, value_serde="str", guarantee="exactly_once"
)
"""


def test_a_killed_workers_tasks_are_carried_and_the_others_process_nothing_twice(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    src, dst, app = unique_name("in"), unique_name("out"), unique_name("app")
    ensure_topics(
        make_admin(kafka_bootstrap), [TopicSpec(src, PARTITIONS), TopicSpec(dst, PARTITIONS)]
    )
    seen_dir = tmp_path / "seen"
    seen_dir.mkdir()
    topology = tmp_path / "carry.py"
    topology.write_text(TOPOLOGY.format(seen=str(seen_dir), src=src, dst=dst))
    store = f"file://{tmp_path}/store"
    job = [str(topology), "--bootstrap", kafka_bootstrap, "--app-id", app, "--store", store,
           "--interval", "1"]  # fmt: skip
    coordinator = CliJob([*CLI, "-v", "coordinator", *job], tmp_path / "coord.log")
    worker = [*CLI, "-v", "worker", *job, "--coordinator", "external"]
    workers = [
        CliJob([*worker, "--state-dir", str(tmp_path / f"state-{i}")], tmp_path / f"w{i}.log")
        for i in range(WORKERS)
    ]
    produced = [0]
    stop = threading.Event()

    def feed() -> None:
        producer = make_producer(kafka_bootstrap)
        while not stop.is_set():
            t0 = time.monotonic()
            for _ in range(RATE // 10):
                i = produced[0]
                producer.produce(src, f"r{i}".encode(), str(i).encode())
                produced[0] = i + 1
            producer.poll(0)
            stop.wait(max(0.0, 0.1 - (time.monotonic() - t0)))
        assert producer.flush(30) == 0

    feeder = threading.Thread(target=feed, daemon=True)
    try:
        for w in workers:
            w.wait_for(r"resumed: running \['", 120)
        feeder.start()
        # Three completions after the feed started: every task has a snapshot with input.
        checkpoints = tmp_path / "store" / app / "checkpoints"

        def latest() -> int:
            ids = [int(p.stem.split("-")[1]) for p in checkpoints.glob("chk-*.json")]
            return max(ids, default=0)

        first = latest()
        coordinator.wait_until(lambda: latest() >= first + 3, "three more checkpoints", 60)
        victim, survivors = workers[1], [workers[0], workers[2]]
        victim.kill()
        carried = coordinator.wait_for(r"its tasks ([^\n]*) are carried at checkpoint (\d+)", 30)
        handover = coordinator.wait_for(
            r"restart \(attempt \d+ -> (\d+)\): hand-over at checkpoint (\d+)", 60
        )
        attempt = int(handover.group(1))
        assert int(handover.group(2)) > int(carried.group(2))
        for w in survivors:
            held = rf"attempt {attempt}: restored \d+ task\(s\)[^\n]*carried on where they held"
            w.wait_for(held, 60)
            w.wait_for(rf"attempt {attempt} resumed", 60)
        time.sleep(3)  # (more input after the change: what the assertions below cover)
    finally:
        stop.set()
        if feeder.is_alive():
            feeder.join(timeout=60)
    try:
        expected = Counter(f"R{i}" for i in range(produced[0]))

        def outputs() -> Counter[str]:
            return Counter(r.value.decode() for r in read_all(kafka_bootstrap, dst) if r.value)

        out: list[Counter[str]] = []

        def all_out() -> bool:
            out[:] = [outputs()]
            return sum(out[0].values()) >= produced[0]

        coordinator.wait_until(all_out, f"{produced[0]} outputs", 120)
        assert out[0] == expected, (
            f"{sum(out[0].values())} outputs of {produced[0]}: "
            f"{len(expected - out[0])} missing, {len(out[0] - expected)} extra"
        )
        assert "failover (attempt" not in coordinator.log(), coordinator.tail()
        # The survivors processed nothing twice: each record at most once per process.
        for w in survivors:
            lines = (seen_dir / f"seen-{w.proc.pid}").read_text().split()
            twice = [r for r, k in Counter(lines).items() if k > 1]
            assert not twice, f"worker {w.proc.pid} processed {len(twice)} records twice"
    finally:
        for w in workers:
            w.kill()
        if coordinator.proc.poll() is None:
            coordinator.proc.send_signal(signal.SIGTERM)
            coordinator.wait(timeout=60)
