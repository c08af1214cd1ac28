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

Then the way a window firing takes through the exactly-once sink: the same records
as ``--batches`` task output batches (4 of 250,000 by default) routed by
``Router.route`` into an ``ExactlyOnceSink``, compared with the pre-column way
(``write_batch`` of one tuple per record): route, encode the blob at the barrier,
decode it (a restore), publish from the buffer and from the decoded blob. Publishing
uses a real (idempotent) producer with no broker: ``produce`` only queues locally,
the queue is purged after each run; transactions are no-ops. This part runs with a
worker's garbage-collector settings (``kstream.hosting.tuning.tune_gc``).

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
from types import SimpleNamespace
from typing import Any

from kstream.config import Guarantee
from kstream.elements.records import OutputBatch
from kstream.hosting.tuning import tune_gc
from kstream.kafka.clients import make_producer
from kstream.kafka.exactly_once_sink import ExactlyOnceSink
from kstream.sinkbuffer.blob import encode_blob
from kstream.sinkbuffer.blobdecode import decode_blob
from kstream.sinkbuffer.buffer import EpochBuffer
from kstream.sinkbuffer.epochs import Epoch, OutputRecord
from kstream.worker.routing import Router, TaskRoute

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


def timed(fn: Callable[..., Any], *args: Any) -> tuple[float, Any]:
    """Wall time of ``fn(*args)`` after a full GC, and its result."""
    gc.collect()
    t0 = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - t0, result


def median_time(fn: Callable[[], Any], runs: int) -> tuple[float, Any]:
    """Median wall time of ``fn()`` over ``runs`` runs (a full GC before each) and its result."""
    times, result = [], None
    for _ in range(runs):
        t, result = timed(fn)
        times.append(t)
    return statistics.median(times), result


class QueueOnlyProducer:
    """A real producer's ``produce``/``poll`` without a broker (records queue locally and
    are purged), no-op transactions: what publishing costs in this process."""

    def __init__(self) -> None:
        self._p = make_producer(
            "127.0.0.1:1",
            extra={
                "queue.buffering.max.messages": 2_000_000,
                "queue.buffering.max.kbytes": 2_000_000,
                "log_level": 0,
            },
        )
        self.produce, self.poll = self._p.produce, self._p.poll

    def list_topics(self, topic: str, timeout: float) -> Any:
        return SimpleNamespace(topics={topic: SimpleNamespace(error=None, partitions={0: None})})

    def begin_transaction(self) -> None:
        pass

    def commit_transaction(self, timeout: float) -> None:
        self._p.purge()
        self._p.poll(0)

    def flush(self, timeout: float) -> int:
        return 0


def routed(recs: list[OutputRecord], batches: int, runs: int, reference: bytes) -> None:
    """Time the sink path of ``recs`` as ``batches`` output batches, per way of routing."""
    keys = [r[2] for r in recs]
    values = [r[3] for r in recs]
    stamps = [r[4] or 0 for r in recs]  # the generated records all have one
    size = -(-len(recs) // batches)
    outputs = [
        OutputBatch(
            "out", False, None, keys[i : i + size], values[i : i + size], stamps[i : i + size]
        )
        for i in range(0, len(recs), size)
    ]
    producer = QueueOnlyProducer()
    router = Router.__new__(Router)  # routing of sink batches needs no router state

    def sink() -> ExactlyOnceSink:
        s = ExactlyOnceSink("bench", "sink-0", "127.0.0.1:1")
        s.transactions._producer, s.attempt = producer, 0
        s.transactions._marker_parts = 1
        return s

    def tuples() -> ExactlyOnceSink:
        """The route before column batches: one OutputRecord tuple per record."""
        s = sink()
        for out in outputs:
            s.write_batch(
                (out.topic, None, k, v, ts, None)
                for k, v, ts in zip(out.keys, out.values, out.timestamps, strict=True)
            )
        s.on_barrier(1)
        return s

    def route() -> ExactlyOnceSink:
        s = sink()
        route = TaskRoute(
            "sink-0",
            0,
            sinks={Guarantee.EXACTLY_ONCE: s},
            sink_topics={"out": Guarantee.EXACTLY_ONCE},
        )
        router.route(route, list(outputs))  # list[Output]
        s.on_barrier(1)
        return s

    def restored() -> ExactlyOnceSink:
        s = sink()
        s.buffer = EpochBuffer.from_blob(reference)
        return s

    variants = {"tuples": tuples, "_route": route}
    times: dict[str, list[list[float]]] = {name: [] for name in variants}
    # Runs interleave the variants: both meet the same allocator state (a process's
    # first large buffers page-fault, ~130 ms per blob here; later ones reuse the heap).
    for _ in range(runs):
        for name, make in variants.items():
            t_route, s = timed(make)
            t_encode, blob = timed(s.buffer_blob)
            if blob != reference:
                raise SystemExit(f"{name}: the blob differs from the one encoded from records")
            t_decode, _ = timed(EpochBuffer.from_blob, blob)
            t_publish, _ = timed(s.on_checkpoint_completed, 1)
            r = restored()
            t_republish, _ = timed(r.on_checkpoint_completed, 1)
            times[name].append([t_route, t_encode, t_decode, t_publish, t_republish])
            del s, blob, r
    for name, rows in times.items():
        ms = [statistics.median(col) * 1000 for col in zip(*rows, strict=True)]
        print(f"  {name:8} {ms[0]:9.1f} {ms[1]:10.0f} {ms[2]:10.0f} {ms[3]:11.0f} {ms[4]:15.0f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--shape", choices=["brief", "varied", "both"], default="both")
    ap.add_argument("--batches", type=int, default=4, help="output batches of the routed part")
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
    tune_gc()  # from here on as in a worker process: far fewer collections of young objects
    n, size = args.records, -(-args.records // args.batches)
    print(
        f"\n{n:,} records as {args.batches} sink batches of {size:,} through the exactly-once "
        f"sink, ms, median of {args.runs} runs\n  (tuples: write_batch of a tuple per record, "
        f"the route before; _route: Router.route now)"
    )
    print(
        f"  {'route':8} {'route':>9} {'encode':>10} {'decode':>10} {'publish':>11} {'publish decoded':>15}"
    )
    for shape in shapes:
        print(f"{shape}:")
        epoch = Epoch(records=records(args.records, shape))
        epoch.seal(1)
        routed(list(epoch.records), args.batches, args.runs, encode_blob([epoch]))
        del epoch


if __name__ == "__main__":
    main()
