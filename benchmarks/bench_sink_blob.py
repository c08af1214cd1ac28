"""Exactly-once sink buffer blob: encode/decode time and size, format version 1 vs 2.

One sealed epoch of ``--records`` output records (what a window firing 1 M results
puts into the task's snapshot at the barrier), encoded and decoded on this thread.
Version 1 is encoded by a frozen copy of the row-wise encoder below (kstream no
longer writes it) and decoded by kstream, which still reads it; version 2 is what
``encode_blob`` writes now. Prints the median of ``--runs`` runs per step.

Shapes:

* ``brief``: ``("out", None, b"user%07d", b'{"start":0,"end":3600000,"value":1}', 1234, None)``
  (one timestamp for all records, so version 2 stores it once);
* ``varied``: the same with distinct timestamps and values of varying length
  (every column but topic and partition stored per record).

Run: ``python -m benchmarks.bench_sink_blob --records 1000000 --runs 3``
"""

from __future__ import annotations

import argparse
import gc
import statistics
import struct
import time
import zlib
from collections.abc import Callable
from functools import partial
from typing import Any

from kstream.kafka.sink import Epoch, OutputRecord, decode_blob, encode_blob

_REC = struct.Struct("<BHiIIqH")
_HDR = struct.Struct("<Hi")
_EPOCH = struct.Struct("<qI")
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")


def encode_blob_v1(epochs: list[Epoch]) -> bytes:
    """The version-1 encoder of kstream/kafka/sink.py as of commit cac743a (unchanged)."""
    topics: dict[str, int] = {}
    out: list[bytes] = []
    pack_rec, pack_hdr = _REC.pack, _HDR.pack
    for e in epochs:
        assert e.checkpoint_id is not None
        out.append(_EPOCH.pack(e.checkpoint_id, len(e.records)))
        for topic, partition, key, value, ts, headers in e.records:
            ti = topics.get(topic)
            if ti is None:
                ti = topics[topic] = len(topics)
            flags = 0
            if partition is not None:
                flags |= 1
            if key is not None:
                flags |= 2
            if value is not None:
                flags |= 4
            if ts is not None:
                flags |= 8
            if headers:
                flags |= 16
            out.append(
                pack_rec(
                    flags,
                    ti,
                    partition if partition is not None else 0,
                    len(key) if key is not None else 0,
                    len(value) if value is not None else 0,
                    ts if ts is not None else 0,
                    len(headers) if headers else 0,
                )
            )
            if key:
                out.append(key)
            if value:
                out.append(value)
            if headers:
                for name, hv in headers:
                    nb = name.encode()
                    out.append(pack_hdr(len(nb), -1 if hv is None else len(hv)))
                    out.append(nb)
                    if hv:
                        out.append(hv)
    head = [b"KSWB", bytes([1]), _U16.pack(len(topics))]
    for name in topics:
        nb = name.encode()
        head.append(_U16.pack(len(nb)))
        head.append(nb)
    head.append(_U32.pack(len(epochs)))
    body = b"".join(head + out)
    return body + _U32.pack(zlib.crc32(body))


def records(n: int, shape: str) -> list[OutputRecord]:
    if shape == "brief":
        value = b'{"start":0,"end":3600000,"value":1}'
        return [("out", None, b"user%07d" % i, value, 1234, None) for i in range(n)]
    return [
        (
            "out",
            None,
            b"user%07d" % i,
            b'{"start":0,"end":3600000,"value":%d}' % (i % 10007),
            1_700_000_000_000 + i,
            None,
        )
        for i in range(n)
    ]


def median_time(fn: Callable[[], Any], runs: int) -> tuple[float, Any]:
    """Median wall time of ``fn()`` over ``runs`` runs (a full GC before each) and its result."""
    times, result = [], None
    for _ in range(runs):
        gc.collect()
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--shape", choices=["brief", "varied", "both"], default="both")
    args = ap.parse_args()
    shapes = ["brief", "varied"] if args.shape == "both" else [args.shape]
    print(f"{args.records:,} records in one sealed epoch, median of {args.runs} runs")
    print(f"{'shape':8} {'format':6} {'encode ms':>10} {'decode ms':>10} {'blob bytes':>14}")
    for shape in shapes:
        epoch = Epoch(records=records(args.records, shape))
        epoch.seal(1)
        for name, encode in (("v1", encode_blob_v1), ("v2", encode_blob)):
            enc, blob = median_time(partial(encode, [epoch]), args.runs)
            dec, out = median_time(partial(decode_blob, blob), args.runs)
            if out[0].records != epoch.records:
                raise SystemExit(f"{shape} {name}: decoded records differ from the encoded ones")
            print(f"{shape:8} {name:6} {enc * 1000:10.0f} {dec * 1000:10.0f} {len(blob):14,}")
            del blob, out


if __name__ == "__main__":
    main()
