"""Runtime throughput alone: in memory, one process, no Kafka.

Two workloads, each next to a plain Python loop doing the same work (decode JSON,
compute, encode JSON) in the same run; median records/s of ``--runs`` runs:

1. stateless chain: map -> filter -> map from a source to a sink;
2. keyed tumbling count over ``--keys`` distinct keys (keyed source, one window).

Run: ``python benchmarks/bench_runtime.py [--records N] [--keys K] [--runs R]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from kstream.api import Topology, Tumbling
from kstream.plan import plan_job
from kstream.runtime import OutputBatch, Task
from kstream.state.memory import MemoryBackend

BATCH = 1000


def enrich(v: dict[str, Any]) -> dict[str, Any]:
    return {"user": v["user"], "kind": v["kind"], "cents": round(v["amount"] * 100)}


def keep(v: dict[str, Any]) -> bool:
    return v["kind"] == "click"


def project(v: dict[str, Any]) -> list[Any]:
    return [v["user"], v["cents"]]


def stateless_input(n: int) -> list[tuple[bytes | None, bytes | None, int, int]]:
    kinds = ["click", "view", "purchase"]
    return [
        (
            None,
            json.dumps(
                {"user": f"u{i % 977}", "kind": kinds[i % 3], "amount": i % 50 + 0.25}
            ).encode(),
            i,
            i,
        )
        for i in range(n)
    ]


def run_stateless_kstream(records: list[tuple[Any, Any, int, int]]) -> int:
    t = Topology("bench")
    t.source("in", key_serde="bytes").map(enrich).filter(keep).map(project).to(
        "out", key_serde="bytes"
    )
    task = Task(plan_job(t, "bench", {"in": 1}), "stage0-0", MemoryBackend())
    produced = 0
    for i in range(0, len(records), BATCH):
        task.feed_source("in", 0, records[i : i + BATCH], 0.0)
        produced += sum(len(o.keys) for o in task.drain() if isinstance(o, OutputBatch))
    return produced


def run_stateless_plain(records: list[tuple[Any, Any, int, int]]) -> int:
    loads, dumps = json.loads, json.JSONEncoder(separators=(",", ":")).encode
    out: list[tuple[Any, bytes, int]] = []
    for k, v, ts, _off in records:
        e = enrich(loads(v))
        if keep(e):
            out.append((k, dumps(project(e)).encode(), ts))
    return len(out)


def keyed_input(n: int, keys: int) -> list[tuple[bytes | None, bytes | None, int, int]]:
    return [(f"k{i % keys}".encode(), b"1", i % 50_000, i) for i in range(n)]


def run_count_kstream(records: list[tuple[Any, Any, int, int]]) -> int:
    t = Topology("bench")
    t.source("in", keyed=True).window(Tumbling(60_000)).count().map(
        lambda r: [r.key, r.start, r.value]
    ).to("out")
    task = Task(plan_job(t, "bench", {"in": 1}), "stage0-0", MemoryBackend(), bounded=True)
    for i in range(0, len(records), BATCH):
        task.feed_source("in", 0, records[i : i + BATCH], 0.0)
    task.end_input("in", 0, 0.0)
    return sum(len(o.keys) for o in task.drain() if isinstance(o, OutputBatch))


def run_count_plain(records: list[tuple[Any, Any, int, int]]) -> int:
    loads, dumps = json.loads, json.JSONEncoder(separators=(",", ":")).encode
    counts: dict[tuple[int, str], int] = {}
    for k, v, ts, _off in records:
        key = k.decode()
        loads(v)
        w = (ts - ts % 60_000, key)
        counts[w] = counts.get(w, 0) + 1
    out = [(key.encode(), dumps([key, s, n]).encode()) for (s, key), n in sorted(counts.items())]
    return len(out)


def measure(fn: Callable[[Any], int], data: Any, runs: int) -> tuple[float, int]:
    rates = []
    produced = 0
    for _ in range(runs):
        t0 = time.perf_counter()
        produced = fn(data)
        rates.append(len(data) / (time.perf_counter() - t0))
    return statistics.median(rates), produced


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()

    data = stateless_input(args.records)
    ks, ks_out = measure(run_stateless_kstream, data, args.runs)
    pl, pl_out = measure(run_stateless_plain, data, args.runs)
    assert ks_out == pl_out, (ks_out, pl_out)
    print(
        f"stateless map->filter->map  kstream {ks:>11,.0f} rec/s   plain loop {pl:>11,.0f} rec/s"
        f"   time ratio kstream/plain {pl / ks:.2f}   ({args.records:,} records, {ks_out:,} out)"
    )

    data = keyed_input(args.records, args.keys)
    kc, kc_out = measure(run_count_kstream, data, args.runs)
    pc, pc_out = measure(run_count_plain, data, args.runs)
    assert kc_out == pc_out, (kc_out, pc_out)
    print(
        f"keyed tumbling count        kstream {kc:>11,.0f} rec/s   plain loop {pc:>11,.0f} rec/s"
        f"   time ratio kstream/plain {pc / kc:.2f}   ({args.records:,} records, {args.keys:,} keys, {kc_out:,} windows)"
    )


if __name__ == "__main__":
    main()
