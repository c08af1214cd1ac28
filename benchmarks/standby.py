"""Standby copies (issue 42 item 3): kill -9 of one of two workers -> first output, with
and without ``--standby-replicas 1``.

Each run, on fresh topics, store and state:

1. load ``keys`` records, one per key, inside one 1-hour window W0 (as
   ``benchmarks/recovery.py``: the job's state holds every key), over 8 partitions;
2. start two ``kstream worker`` processes (they elect the coordinator) running the
   window-count job of the recovery benchmark (keyed source, W0 counts in RocksDB,
   exactly-once sink), checkpoints every 2 s, a file store (or, with ``--store-mbit``,
   S3Proxy behind a rate limit: ``benchmarks/slowstore.py``); wait until the latest
   completed checkpoint covers the whole input and, with standby copies, until the
   worker that survives holds a copy of each task of the other;
3. ``SIGKILL`` the worker that does not host the coordinator (t_kill): detection is
   the session timeout (``--session-timeout``), then a global restore;
4. append one probe record per partition past W0's end, which closes W0 everywhere;
5. the first record a read_committed reader sees on the output is the first new output
   (t_out): recovery = t_out - t_kill. Every key's W0 count is read back (all ``keys``).

The survivor's log gives the restore of each task that moved to it (ms, files and bytes
downloaded). Runs alternate between the two settings.

    python -m benchmarks.standby [--keys 1000000] [--runs 3] [--store-mbit 40] [--bootstrap HOST:PORT]
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import click
from confluent_kafka import Producer as ConfluentProducer

from benchmarks.broker import bootstrap_option, kafka
from benchmarks.generate import KEEP_FOREVER, InputSpec, delete_topic, end_offsets, produce
from benchmarks.procstats import Child
from benchmarks.recovery import (
    RECOVERY_EVENT_RATE,
    checkpoint_offsets,
    probe_key,
    topics_of_group,
    window_bounds,
)
from benchmarks.slowstore import SlowStore, slow_s3
from benchmarks.verify import READ_BACK
from kstream.checkpointstorage.urls import open_store
from kstream.kafka.clients import (
    TopicPartition,
    TopicSpec,
    ensure_topics,
    make_admin,
    make_consumer,
)

REPO = Path(__file__).resolve().parent.parent
PARTITIONS = 8
INTERVAL_S = 2.0

TOPOLOGY = """
from kstream.api import Topology, Tumbling, WatermarkStrategy

topology = Topology("{app}")
(
    topology.source("{src}", key_serde="bytes", value_serde="json",
                    watermark=WatermarkStrategy(max_out_of_orderness_ms=0), keyed=True)
    .window(Tumbling(3_600_000))
    .count()
    .map(lambda r: {{"start": r.start, "end": r.end, "value": r.value}})
    .to("{out}", key_serde="bytes", value_serde="json")
)
"""

RESUMED = re.compile(r"attempt (\d+) resumed: running \[([^\]]*)\]")
RESTORED = re.compile(
    r"task (\S+) restored checkpoint \d+ in (\d+) ms \(RestoreStats\(.*?"
    r"files_downloaded=(\d+), bytes_downloaded=(\d+)"
)


@dataclass
class RunResult:
    replicas: int
    recovery_s: float
    restore_ms: int  # the slowest restore of a task that moved to the survivor
    moved: int
    files_downloaded: int  # by the moved tasks' restores
    bytes_downloaded: int
    copy_bytes: int  # what the survivor's standby copies downloaded before the kill (log)
    restored: int
    expected: int


def _running(log: str) -> set[str]:
    found = RESUMED.findall(log)
    return {t.strip().strip("'") for t in found[-1][1].split(",") if t.strip()} if found else set()


def _wait(cond: Callable[[], bool], what: str, timeout: float, jobs: list[Child]) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        for j in jobs:
            if not j.running:
                raise RuntimeError(f"a worker exited before {what}:\n{j.result().stderr_tail}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout} s")
        time.sleep(0.2)  # polling logs and the store for a condition, with a deadline


def run_once(
    bootstrap: str,
    keys: int,
    replicas: int,
    workdir: Path,
    timeout: float,
    slow: SlowStore | None = None,
) -> RunResult:
    run_id = uuid.uuid4().hex[:8]
    app = f"bench-standby-{replicas}-{run_id}"
    src, out = f"{app}.in", f"{app}.out"
    spec = InputSpec(keys, keys, PARTITIONS, event_rate=RECOVERY_EVENT_RATE, cover=True)
    _, w0_end = window_bounds(spec)
    ensure_topics(
        make_admin(bootstrap),
        [TopicSpec(src, PARTITIONS, KEEP_FOREVER), TopicSpec(out, PARTITIONS, KEEP_FOREVER)],
    )
    here = workdir / app
    here.mkdir(parents=True)
    topology = here / "job.py"
    topology.write_text(TOPOLOGY.format(app=app, src=src, out=out))
    url, options = (
        (f"file://{here / 'store'}", {}) if slow is None else (slow.url(app), slow.options)
    )
    store = open_store(url, options)
    store_argv = ["--store", url]
    for k, v in options.items():
        store_argv += ["--store-option", f"{k}={v}"]

    def argv(name: str) -> list[str]:
        return [sys.executable, "-c", "from kstream.cli import main; main()", "-v", "worker",
                str(topology), "--bootstrap", bootstrap, *store_argv,
                "--state-dir", str(here / f"state-{name}"), "--interval", str(INTERVAL_S),
                "--guarantee", "exactly_once", "--standby-replicas", str(replicas)]  # fmt: skip

    watcher = make_consumer(bootstrap, f"{app}-watcher", read_committed=True, extra=READ_BACK)
    jobs: dict[str, Child] = {}
    failed = True
    try:
        produce(bootstrap, spec, src)
        ends = end_offsets(bootstrap, src, PARTITIONS).ends
        watcher.assign([TopicPartition(out, p, 0) for p in range(PARTITIONS)])
        for name in ("a", "b"):
            jobs[name] = Child(argv(name), cwd=REPO, log_dir=here, name=name)
        both = list(jobs.values())

        def log(name: str) -> str:
            return jobs[name].stderr_path.read_text(errors="replace")

        def split() -> bool:  # each runs some tasks, all of them between the two
            ra, rb = _running(log("a")), _running(log("b"))
            return bool(ra and rb and not ra & rb and len(ra | rb) == PARTITIONS)

        _wait(split, "the tasks split between the workers", timeout, both)
        _wait(
            lambda: all(
                checkpoint_offsets(store, app, src).get(p, -1) >= o for p, o in ends.items()
            ),
            "checkpoint covering the input",
            timeout,
            both,
        )
        elected = [n for n in jobs if "coordinator election: elected" in log(n)]
        survivor = elected[0] if elected else "a"
        victim = "b" if survivor == "a" else "a"
        moved = _running(log(victim))
        if replicas:
            copies = [here / f"state-{survivor}" / app / t / "snapshots" for t in moved]
            _wait(
                lambda: all(c.is_dir() and any(c.glob("*.standby")) for c in copies),
                "standby copies",
                timeout,
                both,
            )
        copy_bytes = _copied_bytes(here / f"state-{survivor}" / app, moved) if replicas else 0
        producer = ConfluentProducer({"bootstrap.servers": bootstrap, "acks": "all"})
        producer.list_topics(src, timeout=10.0)
        seen = len(log(survivor))
        t_kill = time.time()
        jobs[victim].kill()
        jobs[victim].wait(60)
        for p in range(PARTITIONS):
            probe = {"user": "probe", "kind": "click", "amount": 1.0, "ts": w0_end + 1000}
            producer.produce(src, json.dumps(probe).encode(), probe_key(p, PARTITIONS),
                             partition=p, timestamp=w0_end + 1000)  # fmt: skip
        if producer.flush(30.0):
            raise RuntimeError("probe records not delivered")
        deadline = time.monotonic() + timeout
        restored, t_out = 0, None
        while restored < keys and time.monotonic() < deadline:
            got = [m for m in watcher.consume(num_messages=10_000, timeout=0.2) if not m.error()]
            if got and t_out is None:
                t_out = time.time()
            restored += len(got)
        if t_out is None:
            raise RuntimeError(f"no output within {timeout} s:\n{log(survivor)[-3000:]}")
        stats = {
            m.group(1): (int(m.group(2)), int(m.group(3)), int(m.group(4)))
            for m in RESTORED.finditer(log(survivor)[seen:])
            if m.group(1) in moved
        }
        failed = False
        return RunResult(
            replicas=replicas,
            recovery_s=t_out - t_kill,
            restore_ms=max((s[0] for s in stats.values()), default=-1),
            moved=len(moved),
            files_downloaded=sum(s[1] for s in stats.values()),
            bytes_downloaded=sum(s[2] for s in stats.values()),
            copy_bytes=copy_bytes,
            restored=restored,
            expected=keys,
        )
    finally:
        for j in jobs.values():
            j.stop()
        watcher.close()
        for t in sorted({src, out, *topics_of_group(bootstrap, app)}):
            delete_topic(bootstrap, t)
        if not failed:  # (a failed run's logs stay in the workdir)
            shutil.rmtree(here, ignore_errors=True)


def _copied_bytes(root: Path, tasks: set[str]) -> int:
    """The size of the survivor's standby copies of ``tasks`` (their newest)."""
    total = 0
    for t in tasks:
        for mark in (root / t / "snapshots").glob("*.standby"):
            d = mark.with_suffix("")
            total += sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
    return total


def summary(results: list[RunResult]) -> list[str]:
    def ms(xs: list[float]) -> str:
        return f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})"

    lines = [
        "| standby replicas | runs | kill -9 -> first output s | slowest moved-task restore ms "
        "| moved tasks' download MB | survivor's copies MB | all keys back |",
        "|---|---|---|---|---|---|---|",
    ]
    for n in sorted({r.replicas for r in results}):
        rs = [r for r in results if r.replicas == n]
        lines.append(
            f"| {n} | {len(rs)} | {ms([r.recovery_s for r in rs])} "
            f"| {ms([float(r.restore_ms) for r in rs])} "
            f"| {ms([r.bytes_downloaded / 1e6 for r in rs])} "
            f"| {ms([r.copy_bytes / 1e6 for r in rs])} "
            f"| {'yes' if all(r.restored == r.expected for r in rs) else 'NO'} |"
        )
    return lines


@click.command()
@bootstrap_option
@click.option("--keys", type=int, default=1_000_000, show_default=True)
@click.option("--runs", type=int, default=3, show_default=True)
@click.option("--timeout", type=float, default=1200.0, show_default=True)
@click.option("--workdir", type=click.Path(path_type=Path), default=None)
@click.option(
    "--store-mbit",
    type=float,
    default=0.0,
    show_default=True,
    help="0: a file store. Else an S3 store (S3Proxy) whose replies are limited to this "
    "many Mbit/s (benchmarks/slowstore.py; needs root for tc).",
)
def main(
    bootstrap: str | None,
    keys: int,
    runs: int,
    timeout: float,
    workdir: Path | None,
    store_mbit: float,
) -> None:
    wd = workdir or Path(tempfile.mkdtemp(prefix="kstream-standby-"))
    results: list[RunResult] = []
    with kafka(bootstrap, wd) as (server, what), contextlib.ExitStack() as stack:
        slow = stack.enter_context(slow_s3(wd, store_mbit)) if store_mbit > 0 else None
        where = (
            f"S3Proxy at {slow.options['endpoint']}, replies at {store_mbit:g} Mbit/s"
            if slow
            else "a file store"
        )
        print(f"broker: {what}; {where}; {keys:,} keys, {runs} run(s) each", flush=True)
        for i in range(runs):
            for replicas in (0, 1) if i % 2 == 0 else (1, 0):
                r = run_once(server, keys, replicas, wd, timeout, slow)
                print(r, flush=True)
                results.append(r)
    print("\n".join(summary(results)))


if __name__ == "__main__":
    main()
