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

import os
import subprocess
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from integration.cli_job import CLI
from integration.e2e.harness import REPO
from integration.test_global_alignment import assert_exact_windows, write_backlog
from integration.test_watermark_alignment import BASE, STEP_MS
from kstream.kafka.control import ControlReader
from kstream.protocol.messages import CheckpointCompleted, WatermarkReport

PER_PARTITION = 9_000
HALF = BASE + PER_PARTITION * STEP_MS // 2
SLOW_S = 0.0004  # per record: ~15 s for the backlog, more on a busy machine


def test_checkpoints_complete_during_a_slow_catch_up(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    src, out, app = unique_name("in"), unique_name("out"), unique_name("ifirst")
    topology = tmp_path / "ifirst.py"
    rows = write_backlog(kafka_bootstrap, src, out, topology, PER_PARTITION)

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

    assert_exact_windows(kafka_bootstrap, out, rows)
