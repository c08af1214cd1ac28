"""The ``<app>.commits`` topic (docs/design.md §7): the exactly-once sinks' commit markers.

A marker ``(task, checkpoint, attempt)`` is written in the same Kafka transaction as
the output of that task's epochs up to ``checkpoint``; a restarted sink reads its latest
marker (read_committed, to the high watermark) to know what is already published.
"""

from __future__ import annotations

import json
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kstream.kafka.clients import TopicPartition, TopicSpec, make_consumer, watermark_offsets
from kstream.names import commits_topic, marker_reader_group
from kstream.sinkbuffer.epochs import SinkError

__all__ = [
    "CommitMarker",
    "commits_topic_spec",
    "marker_partition",
    "read_latest_marker",
    "read_latest_markers",
]


def commits_topic_spec(app: str, partitions: int = 1) -> TopicSpec:
    """The ``<app>.commits`` topic: compacted, keyed by task, one marker per task kept."""
    return TopicSpec(commits_topic(app), partitions, {"cleanup.policy": "compact"})


@dataclass(frozen=True)
class CommitMarker:
    """``(task, checkpoint, attempt)``: output of epochs ≤ checkpoint of task is published."""

    task: str
    checkpoint: int
    attempt: int

    def encode(self) -> bytes:
        return json.dumps(
            {"task": self.task, "checkpoint": self.checkpoint, "attempt": self.attempt},
            separators=(",", ":"),
        ).encode()

    @classmethod
    def decode(cls, value: bytes) -> CommitMarker:
        """Parse a marker value; SinkError if it is not one."""
        try:
            d = json.loads(value)
            task, cp, attempt = d["task"], d["checkpoint"], d["attempt"]
        except (ValueError, TypeError, KeyError) as e:
            raise SinkError(f"malformed commit marker {value[:200]!r}: {e}") from e
        if not isinstance(task, str) or type(cp) is not int or type(attempt) is not int:
            raise SinkError(f"malformed commit marker {value[:200]!r}: wrong field types")
        return cls(task, cp, attempt)


def marker_partition(task: str, partitions: int) -> int:
    """The partition of ``<app>.commits`` holding ``task``'s markers (stable hash)."""
    return zlib.crc32(task.encode()) % partitions


def read_latest_marker(
    bootstrap: str,
    app: str,
    task: str,
    topic: str,
    partitions: int,
    timeout: float,
    client_config: Mapping[str, Any] | None,
) -> CommitMarker | None:
    """``task``'s latest committed marker on ``topic`` (``partitions`` partitions), read
    to the end of its partition."""
    return read_latest_markers(bootstrap, app, [task], topic, partitions, timeout, client_config)[
        task
    ]


def read_latest_markers(
    bootstrap: str,
    app: str,
    tasks: Sequence[str],
    topic: str,
    partitions: int,
    timeout: float,
    client_config: Mapping[str, Any] | None,
) -> dict[str, CommitMarker | None]:
    """The latest committed marker of each of ``tasks`` (None: none yet), each read to
    the end of its partition — one reader for them all, each partition read once (a
    worker restoring hundreds of tasks: not a reader and a read of the partition each)."""
    if not tasks:
        return {}
    wanted = {t.encode(): t for t in tasks}
    parts = sorted({marker_partition(t, partitions) for t in tasks})
    consumer = make_consumer(
        bootstrap,
        marker_reader_group(app, tasks[0]),  # never joins or commits: assign() only
        read_committed=True,
        extra=client_config,
    )
    latest: dict[str, CommitMarker | None] = dict.fromkeys(tasks)
    try:
        # The end to read to is the HIGH WATERMARK, not the read_committed end
        # (the last stable offset): an open transaction of another task that
        # began before our latest marker holds the LSO below that marker.
        # Reading read_committed up to the high watermark waits for such
        # transactions to finish instead of missing our marker (which would
        # publish the buffer twice).
        ends: dict[int, int] = {}
        starts = []
        for p in parts:
            low, high = _high_watermark(bootstrap, TopicPartition(topic, p), timeout, client_config)
            if high > low:
                ends[p] = high
                starts.append(TopicPartition(topic, p, low))
        if not starts:
            return latest
        consumer.assign(starts)
        deadline = time.monotonic() + timeout
        while True:
            behind = [
                pos
                for pos in consumer.position([TopicPartition(topic, p) for p in ends])
                if pos.offset < ends[pos.partition]
            ]
            if not behind:
                return latest
            if time.monotonic() > deadline:
                at = ", ".join(
                    f"{topic}[{b.partition}] stalled at offset {b.offset} < {ends[b.partition]}"
                    for b in behind
                )
                raise SinkError(
                    f"sink {', '.join(tasks[:3])}: reading {at} for {timeout}s (an open "
                    f"transaction of another task holds the read_committed end?)"
                )
            msg: Any
            for msg in consumer.consume(500, 0.2):
                err = msg.error()
                if err is not None:
                    if err.fatal():
                        raise SinkError(f"sink {', '.join(tasks[:3])}: reading markers: {err}")
                    continue
                task = wanted.get(msg.key())
                if task is not None and msg.value() is not None:
                    m = CommitMarker.decode(msg.value())
                    seen = latest[task]
                    if seen is None or m.checkpoint >= seen.checkpoint:
                        latest[task] = m
    finally:
        consumer.close()


def _high_watermark(
    bootstrap: str, tp: TopicPartition, timeout: float, extra: Mapping[str, Any] | None
) -> tuple[int, int]:
    """(low, high watermark) of ``tp``, as a read_uncommitted reader sees them."""
    c = make_consumer(bootstrap, "kstream.watermark-query", read_committed=False, extra=extra)
    try:
        return watermark_offsets(c, tp.topic, tp.partition, timeout)
    finally:
        c.close()
