"""What a contender wrote: reading an output topic back, and what workload 1 must produce.

The harness checks every run's output here, so a contender that drops, duplicates or
miscomputes records is reported as such instead of being timed as fast.
"""

from __future__ import annotations

import io
import json
import time
import uuid
import zlib
from dataclasses import dataclass
from typing import Any, Literal

import fastavro

from benchmarks.generate import Format, InputSpec, events
from benchmarks.workloads import (
    DEDUP_WITHIN_MS,
    OUT_EVENT_SCHEMA_FILE,
    keep,
    load_schema,
    transform,
)
from kstream.kafka.clients import KafkaError, TopicPartition, make_consumer

#: How to check an output topic's values: workload 1's events in this format (their
#: ``cents`` are summed) or window results ``{"start", "end", "value"}`` (digested).
Decode = Literal["json", "avro", "windows"]


@dataclass(frozen=True)
class OutputStats:
    """Committed records in an output topic; for workload 1 the sum of their ``cents``; for
    window counts an order-independent digest of every (key, start, end, count)."""

    records: int
    cents: int | None = None
    digest: int | None = None


def window_digest(key: bytes, start: int, end: int, count: int) -> int:
    """One window result's share of ``OutputStats.digest`` (the digest is their sum mod 2**64)."""
    return zlib.crc32(b"%s|%d|%d|%d" % (key, start, end, count)) * 2654435761


def expected_windows(spec: InputSpec, window_ms: int) -> OutputStats:
    """Workloads 2/3's exact output for ``spec``: a count per key and tumbling window of
    ``window_ms`` for every window that closed, i.e. whose end is at most the largest
    timestamp of its key's partition (the watermark, no out-of-orderness allowed)."""
    counts: dict[tuple[bytes, int, int], int] = {}
    top: dict[int, int] = {}
    for part, key, _, ts in events(spec):
        start = ts - ts % window_ms
        wk = (key, start, part)
        counts[wk] = counts.get(wk, 0) + 1
        if ts > top.get(part, -1):
            top[part] = ts
    n = digest = 0
    for (key, start, part), c in counts.items():
        if start + window_ms <= top[part]:
            n += 1
            digest += window_digest(key, start, start + window_ms, c)
    return OutputStats(n, None, digest % 2**64)


def expected_stateless(spec: InputSpec) -> OutputStats:
    """Workload 1's exact output for ``spec``: how many records pass and their total cents."""
    n = cents = 0
    for _, _, event, _ in events(spec):
        if keep(event):
            n += 1
            cents += transform(event)["cents"]
    return OutputStats(n, cents)


def expected_dedup(spec: InputSpec) -> OutputStats:
    """Workload 6's exact output count for ``spec``: records not within an hour of the
    last record passed on for their key (input event time increases per partition)."""
    kept: dict[bytes, int] = {}
    n = 0
    for _, key, event, _ in events(spec):
        last = kept.get(key)
        if last is None or abs(event["ts"] - last) >= DEDUP_WITHIN_MS:
            kept[key] = event["ts"]
            n += 1
    return OutputStats(n)


#: Consumer settings of the harness's read-backs: librdkafka stops prefetching a partition
#: at 100 000 queued messages by default, and reading 1 M records back took ~7 s of every
#: run (over 5 min of the full run); with a deeper queue ~2 s.
READ_BACK: dict[str, Any] = {
    "queued.min.messages": 1_000_000,
    "queued.max.messages.kbytes": 1 << 20,
}


def read_output(
    bootstrap: str,
    topic: str,
    partitions: int,
    *,
    decode: Decode | None = None,
    timeout: float = 300.0,
) -> OutputStats:
    """Read ``topic`` (read_committed) to its end; with ``decode`` also sum workload 1's
    ``cents`` or digest the window results (see ``OutputStats``).

    Raises TimeoutError if the end is not reached within ``timeout`` s.
    """
    schema = fastavro.parse_schema(load_schema(OUT_EVENT_SCHEMA_FILE)) if decode == "avro" else None
    consumer = make_consumer(
        bootstrap,
        f"bench-verify-{uuid.uuid4().hex[:8]}",
        read_committed=True,
        extra={"enable.partition.eof": True, **READ_BACK},
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    at_end: set[int] = set()
    n = 0
    cents = digest = 0
    deadline = time.monotonic() + timeout
    try:
        while len(at_end) < partitions:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{topic}: end not reached within {timeout}s "
                    f"({n} records read, partitions at end: {sorted(at_end)})"
                )
            for m in consumer.consume(num_messages=10_000, timeout=0.5):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        at_end.add(m.partition() or 0)
                        continue
                    raise RuntimeError(f"{topic}: consume error {err}")
                at_end.discard(m.partition() or 0)  # more data after an EOF: not at end yet
                n += 1
                if decode == "windows":
                    r = json.loads(m.value() or b"")
                    digest += window_digest(m.key() or b"", r["start"], r["end"], r["value"])
                elif decode is not None:
                    cents += _cents(m.value() or b"", decode, schema)
    finally:
        consumer.close()
    if decode == "windows":
        return OutputStats(n, None, digest % 2**64)
    return OutputStats(n, cents if decode is not None else None)


def _cents(value: bytes, fmt: Format, schema: Any) -> int:
    if fmt == "avro":
        record: dict[str, Any] = fastavro.schemaless_reader(io.BytesIO(value), schema, None)  # type: ignore[assignment]
        return int(record["cents"])
    return int(json.loads(value)["cents"])
