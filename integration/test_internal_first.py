"""Checkpoints complete while one worker catches up on a backlog through a slow function.

One ``kstream worker`` runs a job of two stages (a slow map, then a ``key_by`` window
count) on a backlog of four partitions written before it starts. Its consumer fetches
the backlog ahead, and the stage behind the ``key_by`` reads its input — and the
checkpoints' barriers — from the same consumer: before internal records were read
first (kstream.worker.internalfirst), they came only after every user-topic record
fetched before them, and the first checkpoint completed when the whole backlog was
processed (24 s; none before). The control topic shows the order: checkpoints complete
while the worker's watermark reports are still in the first half of the backlog. The
output is exactly the windows of every record.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from integration.cli_job import CLI
from integration.e2e.harness import REPO
from integration.edge_tools import read_all
from integration.test_global_alignment import BASE, CLOSE, DRIFT_MS, STEP_MS, TOPOLOGY
from kstream.kafka.clients import TopicSpec, ensure_topics, make_admin, make_producer
from kstream.kafka.control import ControlReader
from kstream.protocol.messages import CheckpointCompleted, WatermarkReport

PARTITIONS = 4
PER_PARTITION = 6_000
HALF = BASE + PER_PARTITION * STEP_MS // 2
SLOW_S = 0.0004  # per record: ~10 s for the backlog, more on a busy machine


def _rows() -> list[tuple[int, int, bytes]]:
    rows = [
        (p, BASE + i * STEP_MS, json.dumps({"k": f"k{(i + p) % 7}"}).encode())
        for i in range(PER_PARTITION)
        for p in range(PARTITIONS)
    ]
    return rows + [(p, CLOSE, b'{"k":"close"}') for p in range(PARTITIONS)]


def test_checkpoints_complete_during_a_slow_catch_up(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    src, out, app = unique_name("in"), unique_name("out"), unique_name("ifirst")
    ensure_topics(make_admin(kafka_bootstrap), [TopicSpec(src, PARTITIONS), TopicSpec(out, 4)])
    topology = tmp_path / "ifirst.py"
    topology.write_text(TOPOLOGY.format(source=src, sink=out, drift=DRIFT_MS))
    rows = _rows()
    producer = make_producer(kafka_bootstrap, extra={"linger.ms": 5})
    for part, ts, value in rows:
        producer.produce(src, value, None, partition=part, timestamp=ts)
    assert producer.flush(60) == 0

    log = tmp_path / "worker.log"
    proc = subprocess.Popen(
        [*CLI, "-v", "worker", str(topology), "--bootstrap", kafka_bootstrap, "--app-id", app,
         "--store", f"file://{tmp_path}/store", "--state-dir", str(tmp_path / "state"),
         "--interval", "0.5", "--stop-when-idle", "4"],
        cwd=REPO, env={**os.environ, "KSTREAM_TEST_SLOW_S": str(SLOW_S)},
        stdout=log.open("ab"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        rc = proc.wait(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert rc == 0, "\n".join(log.read_text(errors="replace").splitlines()[-40:])

    # In control-topic order: the checkpoints completed before the worker reported a
    # watermark past the first half of its backlog.
    reader = ControlReader(kafka_bootstrap, app)
    history = reader.read_to_end()
    reader.close()
    early = 0
    for msg in history:
        if isinstance(msg, WatermarkReport) and msg.slowest.get(src, 0) >= HALF:
            break
        early += isinstance(msg, CheckpointCompleted)
    print("[ifirst] control:", Counter(type(m).__name__ for m in history))
    print(f"[ifirst] checkpoints completed in the first half of the backlog: {early}")
    assert early >= 2, early

    counts: Counter[tuple[str, int]] = Counter()
    for _p, ts, v in rows:
        if ts < CLOSE:
            counts[(json.loads(v)["k"], ts - ts % 1000)] += 1
    want = Counter({(k, start, c): 1 for (k, start), c in counts.items()})
    got: Counter[tuple[str, int, int]] = Counter()
    for r in read_all(kafka_bootstrap, out):
        assert r.value is not None
        v = json.loads(r.value)
        if v["start"] < CLOSE - 1000:
            got[(v["k"], v["start"], v["count"])] += 1
    assert got == want
