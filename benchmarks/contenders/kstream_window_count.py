"""kstream, workloads 2 and 3 and both sides of workload 4's checkpoint overhead: a keyed
tumbling-window count in RocksDB state, one result per (key, window) when it closes.

The input is keyed by user and partitioned by key, so the source is ``keyed=True``
(the Kafka key groups, no repartition — as Quix groups by the message key). The
watermark is the partition's largest timestamp (no out-of-orderness allowance), so a
window closes when its partition's event time passes its end, as the Quix contender's
``closing_strategy="partition"``. ``--guarantee`` picks the sink's guarantee,
``--checkpointing on|off`` and ``--commit-interval`` the checkpointing.
"""

from __future__ import annotations

import argparse
from typing import Any

from benchmarks.contenders.kstreamapp import guarantee, run_job
from benchmarks.workloads import contender_parser
from kstream.api import Topology, Tumbling, WatermarkStrategy, WindowResult


def result_row(r: WindowResult) -> dict[str, Any]:
    """The output value: the window and its count (the same fields Quix emits)."""
    return {"start": r.start, "end": r.end, "value": r.value}


def window_count(a: argparse.Namespace) -> Topology:
    """Workload 2's topology for the contender arguments ``a``."""
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
    return topology


def main() -> None:
    a = contender_parser(__doc__ or "").parse_args()
    run_job("kstream_window_count", window_count(a), a)


if __name__ == "__main__":
    main()
