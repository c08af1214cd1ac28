"""Prompt stops with a slow user function (issue 13 point 7) on a real broker.

Each record takes 15 ms in a ``map``: one 800-record batch is 12 s of work. SIGTERM
must still stop the job within seconds, after a final checkpoint of what its tasks
had processed (exit 0), and a second run continues exactly where it stopped.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from integration.cli_job import CliJob, run_args, run_to_end
from integration.edge_tools import read_all
from kstream.checkpointstorage.file import FileStore
from kstream.checkpointstorage.metadata import completed_ids
from kstream.kafka.clients import AdminClient, TopicSpec, ensure_topics, make_producer

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
    args = run_args(topology, kafka_bootstrap, app, tmp_path)
    job = CliJob(args, tmp_path / "first.log")
    try:  # running, with a checkpoint taken mid-batch
        job.wait_until(lambda: bool(completed_ids(store, app)), "checkpoint", 90)
        code, took = job.stop()
    finally:
        job.kill()
    assert code == 0, job.tail()
    assert took < 8.0, f"SIGTERM took {took:.1f} s"
    assert "the final checkpoint completed" in job.log(), job.tail()
    first = len(read_all(kafka_bootstrap, out))
    # Checkpoints (and the stop) happened mid-batch: without slices the first one would
    # complete only after the whole batch, and the stop would wait for it.
    assert 0 < first < RECORDS

    # The rest, exactly once, in a second run.
    code, log = run_to_end([*args, "--stop-when-idle", "2"], timeout=150)
    assert code == 0, log[-3000:]
    assert sorted(int(r.value or b"") for r in read_all(kafka_bootstrap, out)) == list(
        range(RECORDS)
    )
