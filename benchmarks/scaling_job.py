"""The jobs the scaling curves run, the way the kstream contenders run them
(``contenders/kstreamapp.run_job``: one worker and the coordinator in one process), plus
``--sink-buffer-memory`` (the worker's exactly-once sink buffer budget, bytes):

- ``--topology window-count`` (default): workload 2's keyed tumbling-window count
  (``contenders/kstream_window_count.window_count``, the same topology);
- ``--topology forward``: every input record to the exactly-once sink unchanged (key
  and value bytes), so with a long ``--commit-interval`` one interval's output is the
  whole input: what the sink buffer holds and nothing else.

    python -m benchmarks.scaling_job <contender arguments> [--topology forward]
        [--sink-buffer-memory BYTES]
"""

from __future__ import annotations

import dataclasses

from benchmarks.contenders.kstream_window_count import window_count
from benchmarks.contenders.kstreamapp import guarantee, job_config, run_job
from benchmarks.workloads import contender_parser
from kstream.api import Topology


def main() -> None:
    p = contender_parser(__doc__ or "")
    p.add_argument("--topology", choices=("window-count", "forward"), default="window-count")
    p.add_argument("--sink-buffer-memory", type=int, default=64 * 1024 * 1024)
    a = p.parse_args()
    if a.topology == "forward":
        topology = Topology(a.group)
        topology.source(a.input, key_serde="bytes", value_serde="bytes").to(
            a.output, key_serde="bytes", value_serde="bytes", guarantee=guarantee(a)
        )
    else:
        topology = window_count(a)
    cfg = dataclasses.replace(job_config(a), sink_buffer_memory=a.sink_buffer_memory)
    run_job("scaling_job", topology, a, cfg)


if __name__ == "__main__":
    main()
