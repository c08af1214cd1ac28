"""Threads, open files and RSS of one worker process by its number of tasks (issue 41 item 1).

A 2-stage keyed window job (``key_by`` the event's kind, repartitioned, then a keyed
tumbling-window count; exactly-once sink; checkpoints every 5 s) run by one
``kstream worker`` (its coordinator elected in it, as deployed) over an input topic of P
partitions: 2 x P tasks. Once the input is processed and a checkpoint covering it
completed, the worker's ``/proc`` is read a few times, a second apart: its threads,
its open file descriptors and its RSS (the largest of the samples).

    python -m benchmarks.procs_per_task [--bootstrap HOST:PORT] [--tasks 4 --tasks 24 --tasks 64]

``--records 0``: idle tasks (an empty input topic), measured once a first checkpoint
completed; by default 20 000 records over 1 000 keys give every task a little state.

``--tracemalloc``: the worker traces its Python allocations from the import of its
topology module (before any task is built) and, once measured, dumps a snapshot; the
table of what grew per task between the first and the last task count, by source line,
follows the others (``benchmarks.memory_by_line``). Tracing costs memory and time of
its own: measure RSS without it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import click

from benchmarks import generate
from benchmarks.broker import bootstrap_option, kafka
from benchmarks.generate import KEEP_FOREVER, InputSpec
from benchmarks.memory_by_line import growth_table
from benchmarks.procstats import Child
from benchmarks.scaling_runs import _covered
from kstream.checkpointstorage.metadata import latest_completed
from kstream.checkpointstorage.urls import open_store
from kstream.kafka.clients import TopicSpec, ensure_topics, make_admin

REPO_DIR = Path(__file__).resolve().parent.parent

_TOPOLOGY = """\
import json, os, threading, time, tracemalloc

from kstream.api import Topology, Tumbling, WatermarkStrategy

if {trace_frames}:
    tracemalloc.start({trace_frames})


def _dump_thread_names(path):  # the benchmark's view of Python threads: native id -> name
    while True:
        names = {{t.native_id: t.name for t in threading.enumerate()}}
        with open(path + ".tmp", "w") as f:
            json.dump(names, f)
        os.replace(path + ".tmp", path)
        if tracemalloc.is_tracing() and os.path.exists(path + ".snap-request"):
            tracemalloc.take_snapshot().dump(path + ".snap.tmp")
            os.replace(path + ".snap.tmp", path + ".snap")
            os.remove(path + ".snap-request")
        time.sleep(1.0)


threading.Thread(target=_dump_thread_names, args=({names!r},), name="bench-names",
                 daemon=True).start()

topology = Topology({app!r})
(
    topology.source({topic!r}, key_serde="bytes", value_serde="json",
                    watermark=WatermarkStrategy(max_out_of_orderness_ms=0))
    .key_by(lambda e: e["user"], key_serde="str", partitions={partitions})
    .window(Tumbling(60_000))
    .count()
    .map(lambda r: {{"start": r.start, "end": r.end, "value": r.value}})
    .to({output!r}, key_serde="str", value_serde="json")
)
"""


@dataclass(frozen=True)
class Row:
    tasks: int
    threads: int
    open_files: int
    rss_mb: float
    threads_by: dict[str, int] = field(default_factory=dict)  # kind of thread -> how many
    files_by: dict[str, int] = field(default_factory=dict)  # kind of descriptor -> how many
    traced: Path | None = None  # the worker's tracemalloc snapshot (``--tracemalloc``)


def thread_kind(name: str) -> str:
    """A thread's name without what differs per task or per thread of one pool:
    ``upload-s1-7_0`` -> ``upload-*``, ``rdk:broker12`` -> ``rdk:brokerN``."""
    head = name.split("-", 1)[0]
    if head in ("upload", "put", "get") and "-" in name:
        return f"{head}-*"
    return re.sub(r"\d+", "N", re.sub(r"_\d+$", "", name))


def fd_kind(target: str, state_dir: str) -> str:
    """What a descriptor is: ``socket``, ``pipe``, ``anon_inode:[eventfd]``, or for a file
    under the state directory ``state:`` and the RocksDB file's kind (``sst``, ``LOG``...)."""
    if target.startswith(("socket:", "pipe:")):
        return target.split(":", 1)[0]
    if not target.startswith(state_dir):
        return target if target.startswith("anon_inode:") else "other file"
    base = target.rsplit("/", 1)[-1]
    if "." in base:
        return "state:" + base.rsplit(".", 1)[-1]
    return "state:" + (re.sub(r"-\d+$", "", base) if base.isupper() or "-" in base else "dir")


def _breakdown(
    pid: int, names_file: Path, state_dir: Path
) -> tuple[dict[str, int], dict[str, int]]:
    """Threads by kind (Python threads by their ``threading`` name, as the worker's
    topology module dumps them; native ones by ``/proc`` comm) and descriptors by kind."""
    try:
        py = {int(k): v for k, v in json.loads(names_file.read_text()).items()}
    except (OSError, ValueError):
        py = {}
    threads: Counter[str] = Counter()
    for t in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            comm = (t / "comm").read_text().strip()
            threads[thread_kind(py.get(int(t.name), comm))] += 1
    files: Counter[str] = Counter()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            files[fd_kind(os.readlink(fd), str(state_dir))] += 1
    return dict(threads), dict(files)


def _worker_pid(spawner: int) -> int:
    """The ``kstream worker`` process: the spawner's child (benchmarks.spawn)."""
    children = Path(f"/proc/{spawner}/task/{spawner}/children").read_text().split()
    return int(children[0])


def _sample(pid: int) -> tuple[int, int, float]:
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    fields = dict(line.split(":", 1) for line in status if ":" in line)
    threads = int(fields["Threads"].strip())
    rss_kb = int(fields["VmRSS"].split()[0])
    return threads, len(list(Path(f"/proc/{pid}/fd").iterdir())), rss_kb / 1024.0


def _snapshot(names: Path, deadline_s: float = 120.0) -> Path:
    """Ask the worker's topology module for a tracemalloc snapshot and wait for it."""
    snap = names.with_name(names.name + ".snap")
    snap.unlink(missing_ok=True)
    names.with_name(names.name + ".snap-request").touch()
    deadline = time.monotonic() + deadline_s
    while not snap.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no tracemalloc snapshot in {deadline_s} s")
        time.sleep(0.5)  # polling for the file the worker writes, with a deadline
    return snap


def measure(
    bootstrap: str, tasks: int, workdir: Path, records: int = 20_000, trace_frames: int = 0
) -> Row:
    partitions = tasks // 2
    rid = uuid.uuid4().hex[:8]
    app, out = f"procs-{rid}", f"procs.out.{rid}"
    if records:
        spec = InputSpec(records, 1_000, partitions)
        topic = spec.topic
        total = sum(generate.load(bootstrap, spec, log=False).ends.values())
    else:  # idle tasks: an empty input, measured once a first checkpoint completed
        topic, total = f"procs.idle.{rid}", 0
        ensure_topics(make_admin(bootstrap), [TopicSpec(topic, partitions, KEEP_FOREVER)])
    topo = workdir / f"{app}.py"
    names = workdir / f"{app}.threads.json"
    topo.write_text(
        _TOPOLOGY.format(
            app=app,
            topic=topic,
            output=out,
            partitions=partitions,
            names=str(names),
            trace_frames=trace_frames,
        )
    )
    store_dir = workdir / f"{app}.store"
    kstream = str(Path(sys.executable).with_name("kstream"))
    child = Child(
        [kstream, "worker", str(topo), "-b", bootstrap, "--store", f"file://{store_dir}",
         "--state-dir", str(workdir / f"state-{app}"), "--interval", "5",
         "--coordinator", "auto",
         # Traced, a worker is several times slower: its checkpoints get the time.
         *(["--timeout", "600"] if trace_frames else [])],
        cwd=REPO_DIR, log_dir=workdir, name=app,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + (1800 if trace_frames else 600)
        while True:
            if not child.running:
                raise RuntimeError(f"the worker exited:\n{child.result().stderr_tail}")
            meta = (
                latest_completed(open_store(f"file://{store_dir}"), app)
                if store_dir.is_dir()
                else None
            )
            covered = _covered(meta, topic) if meta is not None else 0
            if meta is not None and covered >= total:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{tasks} tasks: input not covered ({covered} of {total})")
            time.sleep(0.5)  # polling the store for a condition, with a deadline
        assert meta is not None and len(meta.tasks) == tasks, meta and sorted(meta.tasks)
        pid = _worker_pid(child.pid)
        samples = []
        for _ in range(5):
            samples.append(_sample(pid))
            time.sleep(1.0)  # samples a second apart
        threads_by, files_by = _breakdown(pid, names, workdir / f"state-{app}")
        traced = _snapshot(names) if trace_frames else None
        return Row(tasks, max(s[0] for s in samples), max(s[1] for s in samples),
                   max(s[2] for s in samples), threads_by, files_by, traced)  # fmt: skip
    finally:
        child.stop()
        generate.delete_topic(bootstrap, out)
        if not records:
            generate.delete_topic(bootstrap, topic)


def _by_kind(what: str, counts: list[tuple[int, dict[str, int]]]) -> str:
    """A markdown table: a row per kind, a column per task count."""
    kinds = sorted({k for _, c in counts for k in c}, key=lambda k: (-counts[-1][1].get(k, 0), k))
    head = f"\n| {what} by kind | " + " | ".join(f"{n} tasks" for n, _ in counts) + " |"
    lines = [head, "|---" * (len(counts) + 1) + "|"]
    lines += [f"| {k} | " + " | ".join(str(c.get(k, 0)) for _, c in counts) + " |" for k in kinds]
    return "\n".join(lines)


@click.command()
@bootstrap_option
@click.option("--tasks", "task_counts", type=int, multiple=True, default=(4, 24, 64))
@click.option(
    "--records", default=20_000, show_default=True,
    help="Input records over 1 000 keys (0: idle tasks, an empty input topic).",
)  # fmt: skip
@click.option("--detail", is_flag=True, help="Also tables of threads and descriptors by kind.")
@click.option(
    "--tracemalloc",
    "trace_frames",
    type=int,
    default=0,
    help="Trace the worker's Python allocations (this many frames a block) and tabulate "
    "what grew per task, by line.",
)
@click.option(
    "--snapshots",
    type=click.Path(file_okay=False, path_type=Path),
    help="Keep the tracemalloc snapshots here, as TASKS.snap (benchmarks.memory_by_line).",
)
def main(
    bootstrap: str | None,
    task_counts: tuple[int, ...],
    records: int,
    detail: bool,
    trace_frames: int,
    snapshots: Path | None,
) -> None:
    """Threads, open files and RSS of one worker by its number of tasks."""
    workdir = Path(tempfile.mkdtemp(prefix="procs-per-task-"))
    try:
        with kafka(bootstrap, workdir) as (servers, what):
            click.echo(f"Kafka: {what}")
            click.echo("| tasks | threads | open files | RSS MB |\n|---|---|---|---|")
            rows = []
            for n in task_counts:
                r = measure(servers, n, workdir, records, trace_frames=trace_frames)
                rows.append(r)
                if snapshots is not None and r.traced is not None:
                    snapshots.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(r.traced, snapshots / f"{r.tasks}.snap")
                click.echo(f"| {r.tasks} | {r.threads} | {r.open_files} | {r.rss_mb:.0f} |")
            if detail:
                click.echo(_by_kind("threads", [(r.tasks, r.threads_by) for r in rows]))
                click.echo(_by_kind("descriptors", [(r.tasks, r.files_by) for r in rows]))
            if trace_frames and len(rows) > 1:
                first, last = rows[0], rows[-1]
                assert first.traced is not None and last.traced is not None
                click.echo("\n" + growth_table(first.tasks, first.traced, last.tasks, last.traced))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
