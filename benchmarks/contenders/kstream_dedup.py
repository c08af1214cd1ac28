"""kstream, workload 6: deduplication within an hour of event time per key, with a keyed
process function and a ``ValueState`` in RocksDB: a record is passed on unless one of
the same key was passed on less than an hour (of the value's ``ts``) from it.

The input is keyed by user and partitioned by key, so the source is ``keyed=True``.
``--guarantee`` picks the sink's guarantee, ``--commit-interval`` the checkpointing.
"""

from __future__ import annotations

from typing import Any

from benchmarks.contenders.kstreamapp import guarantee, run_job
from benchmarks.workloads import DEDUP_WITHIN_MS, contender_parser
from kstream.api import Topology, ValueState, WatermarkStrategy


def dedup(key: Any, event: dict[str, Any], ts: int, state: Any, out: Any) -> None:
    seen = state["seen"]
    last = seen.get()
    t = event["ts"]
    if last is None or abs(t - last) >= DEDUP_WITHIN_MS:
        seen.set(t)
        out(event)


def main() -> None:
    a = contender_parser(__doc__ or "").parse_args()
    topology = Topology(a.group)
    (
        topology.source(
            a.input,
            key_serde="bytes",
            value_serde="json",
            watermark=WatermarkStrategy(max_out_of_orderness_ms=0),
            keyed=True,
        )
        .process(dedup, state={"seen": ValueState()})
        .to(a.output, key_serde="bytes", value_serde="json", guarantee=guarantee(a))
    )
    run_job("kstream_dedup", topology, a)


if __name__ == "__main__":
    main()
