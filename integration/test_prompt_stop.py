"""Prompt stops with a slow user function (issue 13 point 7) on a real broker.

Each record takes 15 ms in a ``map``: one 800-record batch is 12 s of work. SIGTERM
must still stop the job within seconds, after a final checkpoint of what its tasks
had processed (exit 0), and a second run continues exactly where it stopped.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from integration.e2e.harness import REPO
from integration.edge_tools import read_all
from kstream.kafka.clients import AdminClient, TopicSpec, ensure_topics, make_producer
from kstream.store.file import FileStore
from kstream.store.metadata import completed_ids

CLI = [sys.executable, "-c", "from kstream.cli import main; main()"]
RECORDS = 800

TOPOLOGY = """
import time
from kstream.api import Topology


def slow(value):
    time.sleep(0.015)
    return value


topology = Topology("slow")
topology.source("{src}", value_serde="str").map(slow).to("{out}", value_serde="str")
"""


def test_sigterm_stops_a_job_with_a_slow_function_within_seconds(
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    src, out, app = unique_name("in"), unique_name("out"), unique_name("slow")
    ensure_topics(kafka_admin, [TopicSpec(src, 1), TopicSpec(out, 1)])
    topology = tmp_path / "slow_topology.py"
    topology.write_text(TOPOLOGY.format(src=src, out=out))
    p = make_producer(kafka_bootstrap)
    for i in range(RECORDS):
        p.produce(src, str(i).encode(), timestamp=1_767_225_600_000 + i)
    assert p.flush(30) == 0
    store = FileStore(tmp_path / "store")
    args = [*CLI, "-v", "run", str(topology), "--bootstrap", kafka_bootstrap, "--app-id", app,
            "--store", f"file://{tmp_path}/store", "--state-dir", str(tmp_path / "state"),
            "--interval", "1"]  # fmt: skip
    log_file = tmp_path / "first.log"
    job = subprocess.Popen(args, stdout=log_file.open("w"), stderr=subprocess.STDOUT, cwd=REPO)
    deadline = time.monotonic() + 90
    while not completed_ids(store, app):  # running, with a checkpoint taken mid-batch
        assert job.poll() is None, log_file.read_text()[-3000:]
        assert time.monotonic() < deadline, "no checkpoint within 90 s"
        time.sleep(0.2)
    t0 = time.monotonic()
    job.send_signal(signal.SIGTERM)
    code = job.wait(timeout=60)
    took = time.monotonic() - t0
    log = log_file.read_text()
    assert code == 0, log[-3000:]
    assert took < 8.0, f"SIGTERM took {took:.1f} s"
    assert "the final checkpoint completed" in log, log[-3000:]
    first = len(read_all(kafka_bootstrap, out))
    # Checkpoints (and the stop) happened mid-batch: without slices the first one would
    # complete only after the whole batch, and the stop would wait for it.
    assert 0 < first < RECORDS

    # The rest, exactly once, in a second run.
    again = subprocess.run(
        [*args, "--stop-when-idle", "2"], capture_output=True, text=True, timeout=150, cwd=REPO
    )
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    assert sorted(int(r.value or b"") for r in read_all(kafka_bootstrap, out)) == list(
        range(RECORDS)
    )
