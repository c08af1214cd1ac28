"""The job the scaling curves run: workload 2's keyed tumbling-window count
(``contenders/kstream_window_count.py``, the same topology) run the way the kstream
contenders run it (``contenders/kstreamapp.py``: one worker and the coordinator in one
process), plus ``--sink-buffer-memory`` (the exactly-once sink buffer's budget) and
``--interval`` (checkpoint interval, s; ``--commit-interval`` is the same).

    python -m benchmarks.scaling_job <contender arguments> [--sink-buffer-memory BYTES]
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import time

from benchmarks.contenders.kstream_window_count import result_row
from benchmarks.contenders.kstreamapp import BenchWorker, guarantee, job_config
from benchmarks.workloads import Progress, Report, contender_parser
from kstream.api import Topology, Tumbling, WatermarkStrategy
from kstream.job import ensure_job_topics, plan_live
from kstream.process.embedded import run_embedded
from kstream.process.signals import install_signal_handlers
from kstream.process.tuning import tune_gc


def main() -> None:
    p = contender_parser(__doc__ or "")
    p.add_argument("--sink-buffer-memory", type=int, default=64 * 1024 * 1024)
    a = p.parse_args()
    logging.basicConfig(
        level=os.environ.get("KSTREAM_BENCH_LOG", "WARNING"),
        format="%(asctime)s %(threadName)s %(name)s %(message)s",
    )
    topology = Topology(a.group)
    (
        topology.source(
            a.input,
            key_serde="bytes",
            value_serde="json",
            watermark=WatermarkStrategy(max_out_of_orderness_ms=0),
            keyed=True,
        )
        .window(Tumbling(a.window_ms))
        .count()
        .map(result_row)
        .to(a.output, key_serde="bytes", value_serde="json", guarantee=guarantee(a))
    )
    cfg = dataclasses.replace(job_config(a), sink_buffer_memory=a.sink_buffer_memory)
    job = plan_live(topology, cfg)
    ensure_job_topics(job)
    progress = None if a.forever else Progress(a.end_offsets)
    worker = BenchWorker(job, progress, commit_interval=a.commit_interval)
    install_signal_handlers(worker)
    tune_gc()
    code = run_embedded(worker)
    t_end = time.time()
    if code != 0:
        raise SystemExit(f"scaling_job: job exit code {code}")
    if progress is None:
        return
    if progress.t_first is None or not progress.done:
        raise SystemExit("scaling_job: stopped before reaching the end offsets")
    if worker.t_fed is not None:
        sys.stderr.write(
            f"scaling_job: all input fed after {worker.t_fed - progress.t_first:.3f} s, "
            f"output committed after {t_end - progress.t_first:.3f} s\n"
        )
    Report("scaling_job", progress.total, -1, progress.t_first, t_end).emit()


if __name__ == "__main__":
    main()
