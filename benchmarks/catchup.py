"""Checkpoint durations while one ``kstream run`` catches up on a backlog through a
``key_by``, two source trees interleaved (kstream.worker.internalfirst was measured so).

Each run, on fresh topics, store and state: ``records`` JSON records over 4 partitions,
then ``kstream run`` of a job that keys them by user and spends ``cost_ms`` of CPU on
each record, before the ``key_by`` (``--slow before``: the stage that reads the backlog
is the slow one) or behind it (``--slow behind``), exactly-once to a sink topic,
checkpoints every second, until idle for 3 s. Every completed checkpoint's metadata is
kept (``--retained``), so each one's trigger to completion is read back from the store.
Runs alternate between the trees (A B, then B A); each runs with its tree as working
directory and first on ``PYTHONPATH``. Prints per run its wall time, the checkpoints
completed and their durations, then per tree the medians over its runs.

    python -m benchmarks.catchup --before /tmp/before [--after TREE] [--runs 2]
        [--records 200000] [--cost-ms 0.1] [--slow before|behind]

Make the before tree with ``git worktree add --detach /tmp/before REV``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import click

from benchmarks.broker import bootstrap_option, kafka
from kstream.checkpointstorage.file import FileStore
from kstream.checkpointstorage.metadata import completed_ids, read_metadata
from kstream.kafka.clients import TopicSpec, ensure_topics, make_admin, make_producer

JOB = """
import time
from kstream.api import Topology

def costly(v):
    until = time.perf_counter() + {cost_s}
    while time.perf_counter() < until:
        pass
    return v

topology = Topology("catchup")
stream = topology.source("{src}", timestamp=lambda v, kafka_ts: v["t"])
{before}stream = stream.key_by(lambda v: v["user"], key_serde="str")
{behind}stream.to("{out}", key_serde="str", value_serde="json")
"""
PARTITIONS = 4
HERE = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Run:
    tree: str
    wall_s: float
    durations_ms: list[float]

    def line(self) -> str:
        d = self.durations_ms or [float("nan")]
        return (
            f"{self.tree}: {self.wall_s:.1f} s, {len(self.durations_ms)} checkpoints, "
            f"median {statistics.median(d):.0f} ms, largest {max(d):.0f} ms "
            f"({', '.join(f'{x:.0f}' for x in self.durations_ms)})"
        )


def summary(runs: list[Run]) -> list[str]:
    """Per tree, in the order first run: the median over its runs of the checkpoints'
    median and largest duration, of the checkpoints completed, and of the wall time."""
    out = []
    for tree in dict.fromkeys(r.tree for r in runs):
        mine = [r for r in runs if r.tree == tree and r.durations_ms]
        if not mine:
            out.append(f"{tree}: no checkpoint completed")
            continue
        med = statistics.median(statistics.median(r.durations_ms) for r in mine)
        top = statistics.median(max(r.durations_ms) for r in mine)
        count = statistics.median(len(r.durations_ms) for r in mine)
        wall = statistics.median(r.wall_s for r in mine)
        out.append(
            f"{tree}: checkpoint median {med:.0f} ms, largest {top:.0f} ms, "
            f"{count:g} checkpoints, {wall:.1f} s ({len(mine)} runs)"
        )
    return out


def job_text(src: str, out: str, cost_ms: float, slow: str) -> str:
    """The job, its costly map before or behind the ``key_by``."""
    costly = "stream = stream.map(costly)\n"
    return JOB.format(
        src=src,
        out=out,
        cost_s=cost_ms / 1000,
        before=costly if slow == "before" else "",
        behind=costly if slow == "behind" else "",
    )


def one_run(bootstrap: str, tree: Path, records: int, cost_ms: float, slow: str) -> Run:
    name = f"cu-{uuid.uuid4().hex[:8]}"
    src, out = f"{name}-in", f"{name}-out"
    ensure_topics(make_admin(bootstrap), [TopicSpec(src, PARTITIONS), TopicSpec(out, PARTITIONS)])
    producer = make_producer(bootstrap)
    for i in range(records):
        value = json.dumps({"user": f"u{i % 997}", "t": i}).encode()
        producer.produce(src, value, None, partition=i % PARTITIONS)
        if i % 5000 == 4999:
            producer.flush(60)
    assert producer.flush(60) == 0
    with tempfile.TemporaryDirectory(prefix="kstream-cu-") as tmp:
        topology = Path(tmp) / "job.py"
        topology.write_text(job_text(src, out, cost_ms, slow))
        args = [sys.executable, "-c", "from kstream.cli import main; main()", "run", str(topology),
                "--bootstrap", bootstrap,
                "--app-id", name, "--store", f"file://{tmp}/store", "--state-dir",
                f"{tmp}/state", "--interval", "1", "--retained", "100000",
                "--stop-when-idle", "3"]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(tree)}
        t0 = time.monotonic()
        done = subprocess.run(args, capture_output=True, text=True, timeout=3600, cwd=tree, env=env)
        wall = time.monotonic() - t0
        if done.returncode != 0:
            raise RuntimeError(f"the job failed ({done.returncode}): {done.stderr[-2000:]}")
        store = FileStore(Path(tmp) / "store")
        durations = [read_metadata(store, name, n).duration_ms for n in completed_ids(store, name)]
    return Run(str(tree), wall, durations)


@click.command()
@bootstrap_option
@click.option("--before", "before", type=click.Path(exists=True, file_okay=False), required=True)
@click.option("--after", "after", type=click.Path(exists=True, file_okay=False), default=str(HERE))
@click.option("--runs", default=2, show_default=True, help="runs of each tree, interleaved")
@click.option("--records", default=200_000, show_default=True)
@click.option("--cost-ms", default=0.1, show_default=True, help="CPU per record in the slow stage")
@click.option(
    "--slow", type=click.Choice(["before", "behind"]), default="before", show_default=True
)
def main(
    bootstrap: str | None,
    before: str,
    after: str,
    runs: int,
    records: int,
    cost_ms: float,
    slow: str,
) -> None:
    trees = [Path(before).resolve(), Path(after).resolve()]
    with kafka(bootstrap) as (bootstrap_, what):
        click.echo(f"{what}; {records} records, {cost_ms} ms a record {slow} the key_by")
        done: list[Run] = []
        for i in range(runs):
            for tree in trees if i % 2 == 0 else trees[::-1]:
                done.append(one_run(bootstrap_, tree, records, cost_ms, slow))
                click.echo(done[-1].line())
        for line in summary(done):
            click.echo(line)


if __name__ == "__main__":
    main()
