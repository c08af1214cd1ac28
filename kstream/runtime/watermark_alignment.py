"""Watermark alignment (the idea of Flink's FLIP-182/217): a source partition whose
watermark runs more than ``max_drift_ms`` ahead of the slowest partition of the same
source is paused until the slowest catches up.

Without it, a catch-up of a backlog (a job started late, a restore after a failure)
reads whichever partitions the consumer happens to fetch first far into the future,
and records of the partitions left behind then arrive behind a watermark they would
never be behind in a live run: late only because of how fast partitions were read.
With it, partitions are read at most ``max_drift_ms`` of event time apart, so the
watermarks a live run and a catch-up reach differ by less than the drift bound, and
a record further behind than that is late in both.

Who holds the others back: a partition with records left to read (its consumer is
behind the end offset, or the end is not known yet) that has not ended. A partition
with nothing to read (a quiet partition of a live topic, a drained one) holds no one
back: it is not slow, only silent, and stopping the others for it would stall a live
job. A partition that has read nothing yet holds the others back from the start, so
no partition races ahead before every one has begun — unless it is known to have
nothing to read (an empty partition, one positioned at its end: the worker's source
knows their lag, ``kstream.kafka.source.SourceConsumer.lag``).

Across workers (Flink aligns through its coordinator): each worker reports its
``slowest`` per topic to the checkpoint coordinator, which publishes the minimum over
all workers; ``paused(..., floor=...)`` counts it as one more partition.

Pure and I/O free: the worker feeds partition states and applies the result with
pause/resume (``kstream.worker``); tests drive it directly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kstream.elements.events import MIN_TS

TP = tuple[str, int]


@dataclass(frozen=True, slots=True)
class PartitionTime:
    """What the aligner needs of one source partition."""

    watermark: int  # the partition's watermark (MIN_TS before its first record)
    backlog: bool  # records are left to read (True when unknown)
    ended: bool = False  # a bounded input reached its end


class WatermarkAligner:
    """Decides which source partitions to pause; ``max_drift_ms`` per source topic
    (topics without an entry are not aligned)."""

    def __init__(self, max_drift_ms: Mapping[str, int]) -> None:
        self.max_drift_ms = dict(max_drift_ms)

    def slowest(self, partitions: Mapping[TP, PartitionTime]) -> dict[str, int]:
        """Per aligned topic, the watermark of its slowest partition that holds the others
        back (a topic without one is absent): what a worker reports for global alignment
        (:mod:`kstream.protocol.alignment`)."""
        slowest: dict[str, int] = {}
        for (topic, _), p in partitions.items():
            if topic in self.max_drift_ms and p.backlog and not p.ended:
                slowest[topic] = min(p.watermark, slowest.get(topic, p.watermark))
        return slowest

    def paused(
        self, partitions: Mapping[TP, PartitionTime], floor: Mapping[str, int] | None = None
    ) -> frozenset[TP]:
        """The partitions to pause now: those more than the drift bound ahead of the
        slowest partition of their topic that holds the others back. ``floor``: the
        slowest watermark per topic of the partitions other workers read (global
        alignment): one more partition that may be the slowest."""
        slowest = self.slowest(partitions)
        for topic, wm in (floor or {}).items():
            if topic in self.max_drift_ms:
                slowest[topic] = min(wm, slowest.get(topic, wm))
        out = []
        for tp, p in partitions.items():
            low = slowest.get(tp[0])
            if low is None or p.ended:
                continue
            if p.watermark > MIN_TS and p.watermark - low > self.max_drift_ms[tp[0]]:
                out.append(tp)
        return frozenset(out)
