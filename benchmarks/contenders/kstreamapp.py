"""Building blocks of the kstream contenders: the job configuration for the contender
arguments, and the job run the way ``kstream run`` runs it — one worker plus the
checkpoint coordinator as a thread of the same process.

The only addition for the benchmark is the stop condition. ``BenchWorker`` is a
``kstream.worker.loop.Worker`` that tracks, per source partition, the offsets its tasks
were fed against the end offsets captured by the harness. Once every partition is
done it calls the worker's graceful stop, ``request_stop()`` (what SIGTERM does, and
what Quix's ``app.stop()`` is to the Quix contenders): with checkpointing the worker
asks the coordinator for a checkpoint at once and stops when it completed (exactly-
once output is visible then); without, it flushes the output and commits its offsets.
The worker loop itself is unchanged.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.workloads import Progress, Report, forever_store_dir
from kstream.api import Topology
from kstream.checkpointstorage.objectstore import parse_store_options
from kstream.config import CheckpointingConfig, Guarantee, JobConfig, KafkaSettings
from kstream.hosting.embedded import run_embedded
from kstream.hosting.signals import install_signal_handlers
from kstream.hosting.tuning import tune_gc
from kstream.job import Job, ensure_job_topics, plan_live
from kstream.kafka.source import RawRecord
from kstream.worker.loop import Worker


def guarantee(a: argparse.Namespace) -> Guarantee:
    """The sink guarantee named by ``--guarantee``."""
    return Guarantee.EXACTLY_ONCE if a.guarantee == "exactly-once" else Guarantee.AT_LEAST_ONCE


def store_dir(a: argparse.Namespace) -> Path:
    """Where the checkpoint store lives.

    Bounded runs keep it inside ``--state-dir`` (the harness deletes that after the
    run). A ``--forever`` job (recovery) keeps it next to the state directory,
    ``<state-dir>.store``: the recovery harness wipes ``--state-dir`` to simulate a
    replacement machine, and the checkpoint store is the shared volume that survives.
    """
    state = Path(a.state_dir)
    return forever_store_dir(state) if a.forever else state / "checkpoints"


def job_config(a: argparse.Namespace) -> JobConfig:
    """The job configuration for the contender arguments ``a`` (app id = ``--group``)."""
    kafka: dict[str, str] = {}
    if a.instance_id:  # static membership: a restart takes the old member's place at once
        kafka["group.instance.id"] = a.instance_id
    return JobConfig(
        app_id=a.group,
        bootstrap_servers=a.bootstrap,
        store_url=a.store_url or f"file://{store_dir(a).resolve()}",
        store_options=parse_store_options(a.store_option),
        state_dir=str(Path(a.state_dir) / "state"),
        checkpointing=CheckpointingConfig(
            enabled=a.checkpointing == "on",
            interval=a.commit_interval,
            guarantee=guarantee(a),
        ),
        kafka=KafkaSettings(kafka),
    )


class BenchWorker(Worker):
    """A ``Worker`` that stops once its tasks were fed every record up to the end offsets
    and the output of all of them is committed (see the module docstring)."""

    def __init__(self, job: Job, progress: Progress | None, **kwargs: Any) -> None:
        super().__init__(job, **kwargs)
        self.progress = progress
        self.t_fed: float | None = None  # when the last input record was fed to its task

    def _feed(self, tp: tuple[str, int], records: list[RawRecord], now: float) -> None:
        p = self.progress
        if p is None or not records or self.tasks.running_for(tp) is None:
            super()._feed(tp, records, now)  # not fed to a task (see Worker._feed)
            return
        if p.t_first is None:
            p.t_first = time.time()  # the first input record is in hand
        super()._feed(tp, records, now)
        if tp[0] not in self.tasks.internal_parts and p.observe(tp[1], records[-1][3]):
            self.request_stop()  # a graceful stop: the final checkpoint commits the output
            self.t_fed = time.time()


def run_job(
    name: str, topology: Topology, a: argparse.Namespace, cfg: JobConfig | None = None
) -> None:
    """Run ``topology`` for the contender arguments ``a`` (job configuration ``cfg``,
    default ``job_config(a)``): to the end offsets and print the report, or
    (``--forever``) until the process is killed."""
    level = os.environ.get("KSTREAM_BENCH_LOG", "WARNING")  # e.g. INFO to see the protocol
    logging.basicConfig(level=level, format="%(asctime)s %(threadName)s %(name)s %(message)s")
    cfg = cfg or job_config(a)
    job = plan_live(topology, cfg)
    ensure_job_topics(job)
    progress = None if a.forever else Progress(a.end_offsets)
    worker = BenchWorker(job, progress, commit_interval=a.commit_interval)
    install_signal_handlers(worker)
    tune_gc()
    code = run_embedded(worker)
    t_end = time.time()
    if code != 0:
        raise SystemExit(f"{name}: job exit code {code}")
    if progress is None:
        return
    if progress.t_first is None or not progress.done:
        raise SystemExit(f"{name}: stopped before reaching the end offsets")
    if worker.t_fed is not None:  # diagnostics: processing vs. waiting for the commit
        sys.stderr.write(
            f"{name}: all input fed after {worker.t_fed - progress.t_first:.3f} s, "
            f"output committed after {t_end - progress.t_first:.3f} s\n"
        )
    Report(name, progress.total, -1, progress.t_first, t_end).emit()
