"""One point of the partitions x workers curves (``benchmarks/scale_point.py``) with its
workers' logs kept and, optionally, ``py-spy dump`` of each worker every few seconds:
where a worker's loop spends its time at many tasks (benchmarks/SCALING.md, "1024
partitions on 4 workers"). The barrier fan-out, without kstream: ``--fanout``.

    python -m benchmarks.scale_probe --partitions 1024 --workers 4 --budget 480 \\
        --worker-arg=--timeout --worker-arg=600 --out /tmp/probe
    python -m benchmarks.scale_probe --fanout 262144 --out /tmp/probe

The point prints its figures (JSON, as ``scale_curves`` stores them); the logs
(``*.err``), dumps (``dump-<pid>.txt``) and, per completed checkpoint still in the store,
where its time went over the tasks (``checkpoints.json``: median, 90th percentile and
largest of each task's trigger-to-barrier, snapshot, upload and acknowledgement delay,
as the checkpoint's metadata keeps them) are in ``--out``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import click

import benchmarks.scale_point as sp
from benchmarks.generate import KEEP_FOREVER
from kstream.checkpointstorage.base import CheckpointStore
from kstream.checkpointstorage.metadata import list_checkpoints
from kstream.checkpointstorage.urls import open_store
from kstream.dev.localbroker import LocalBroker
from kstream.kafka.clients import TopicSpec, ensure_topics, make_admin


def _workers() -> list[int]:
    """The ``kstream worker`` processes running on this machine."""
    out = []
    for d in Path("/proc").iterdir():
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0") if d.name.isdigit() else []
        except OSError:
            continue
        if len(argv) > 2 and argv[1].endswith(b"kstream") and argv[2] == b"worker":
            out.append(int(d.name))
    return out


def _dump_every(seconds: float, out: Path, stop: threading.Event, pyspy: str) -> None:
    t0 = time.monotonic()
    while not stop.wait(seconds):
        for pid in _workers():
            r = subprocess.run([pyspy, "dump", "--pid", str(pid)], capture_output=True, text=True)
            with (out / f"dump-{pid}.txt").open("a") as f:
                f.write(f"==== t={time.monotonic() - t0:.1f}\n{r.stdout}{r.stderr}\n")


PHASES = ("alignment_ms", "sync_ms", "async_ms", "ack_delay_ms")


def checkpoint_phases(store: CheckpointStore, app: str) -> list[dict[str, Any]]:
    """Per completed checkpoint in the store: its duration and, per phase of a task's part
    (trigger to barrier, snapshot, upload, trigger to its acknowledgement read), the
    median, 90th percentile and largest over its tasks, in ms."""
    out = []
    for meta in list_checkpoints(store, app):
        row: dict[str, Any] = {"checkpoint": meta.checkpoint_id, "ms": meta.duration_ms}
        for phase in PHASES:
            v = sorted(getattr(t, phase) for t in meta.tasks.values())
            if v:
                row[phase] = [v[len(v) // 2], v[int(len(v) * 0.9)], v[-1]]
        out.append(row)
    return out


def probe_point(
    partitions: int, workers: int, budget: float, worker_args: list[str], out: Path,
    dump_s: float | None,
) -> dict[str, Any]:  # fmt: skip
    """One point, its logs copied to ``out`` before its directory is removed."""
    cleanup = sp._cleanup

    def keep_logs(bootstrap: str, app: str, pdir: Path) -> None:
        for f in [*pdir.glob("*.err"), *pdir.glob("*.out")]:
            shutil.copy(f, out)
        if (pdir / "store").is_dir():
            phases = checkpoint_phases(open_store(f"file://{pdir / 'store'}"), app)
            (out / "checkpoints.json").write_text(json.dumps(phases, indent=1) + "\n")
        cleanup(bootstrap, app, pdir)

    start = sp.Workers.__init__

    def with_args(self: sp.Workers, argv: list[str], count: int, workdir: Path, app: str) -> None:
        start(self, [*argv, *worker_args], count, workdir, app)

    stop = threading.Event()
    pyspy = shutil.which("py-spy")
    if dump_s and pyspy:
        threading.Thread(target=_dump_every, args=(dump_s, out, stop, pyspy), daemon=True).start()
    sp._cleanup, sp.Workers.__init__ = keep_logs, with_args  # type: ignore[method-assign]
    try:
        with (
            tempfile.TemporaryDirectory(prefix="scale-probe-") as wd,
            LocalBroker(Path(wd) / "kafka") as broker,
        ):
            point = sp.measure_point(
                broker.bootstrap, Path(wd), partitions, workers, records=200_000,
                keys=1_000, budget=budget, label="probe", rss_cap_gb=13.0,
            )  # fmt: skip
    finally:
        stop.set()
        sp._cleanup, sp.Workers.__init__ = cleanup, start  # type: ignore[method-assign]
    return vars(point)


def fanout(records: int, partition_counts: list[int]) -> list[tuple[int, float]]:
    """Seconds one producer takes to deliver ``records`` barrier-sized records spread
    one per partition in turn over each of ``partition_counts`` (one local broker)."""
    from confluent_kafka import Producer

    took = []
    with tempfile.TemporaryDirectory(prefix="fanout-") as wd, LocalBroker(Path(wd) / "kafka") as b:
        for parts in partition_counts:
            topic = f"fanout.{parts}.{uuid.uuid4().hex[:6]}"
            ensure_topics(make_admin(b.bootstrap), [TopicSpec(topic, parts, KEEP_FOREVER)])
            p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5})
            p.list_topics(topic, timeout=10)
            headers: list[tuple[str, str | bytes | None]] = [("ks.event", b"barrier")]
            t0 = time.perf_counter()
            for i in range(records):
                while True:
                    try:
                        p.produce(topic, b"x" * 60, None, partition=i % parts, headers=headers)
                        break
                    except BufferError:
                        p.poll(0.05)  # local queue full: deliveries first
            p.flush()
            took.append((parts, time.perf_counter() - t0))
            del p  # its threads end before the broker does
    return took


@click.command()
@click.option("--partitions", default=1024, show_default=True)
@click.option("--workers", default=4, show_default=True)
@click.option("--budget", default=240.0, show_default=True, help="Seconds per phase.")
@click.option("--worker-arg", "worker_args", multiple=True, help="Added to every worker.")
@click.option("--dump-every", type=float, default=None, help="py-spy dump period, s.")
@click.option("--fanout", "fanout_records", type=int, default=None, help="Only the fan-out.")
@click.option("--out", type=click.Path(path_type=Path), required=True)
def main(
    partitions: int, workers: int, budget: float, worker_args: tuple[str, ...],
    dump_every: float | None, fanout_records: int | None, out: Path,
) -> None:  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    if fanout_records:
        for parts, s in fanout(fanout_records, [4, 1024, 4, 1024, 4, 1024]):
            click.echo(f"{fanout_records} records over {parts} partitions: {s:.2f} s, "
                       f"{fanout_records / s:,.0f} records/s")  # fmt: skip
        return
    point = probe_point(partitions, workers, budget, list(worker_args), out, dump_every)
    click.echo(json.dumps(point))


if __name__ == "__main__":
    main()
