"""Input channels of a task: one per source/table partition, and one per upstream
task inside an internal-topic partition. A channel carries its own watermark,
idleness, alignment state (blocked on a barrier, with a buffer of what arrived
after it) and resume position.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kstream.elements.events import MIN_TS
from kstream.plan.model import InputKind


@dataclass(eq=False, slots=True)
class Channel:
    """Mutable per-input bookkeeping; the task owns and drives it. Slots, no instance
    dict: a task downstream of P tasks has P channels per partition (at 128
    partitions a worker's 256 tasks have 16 384), 56 bytes each less."""

    topic: str
    partition: int
    kind: InputKind
    upstream: str | None
    idle_timeout_s: float | None
    last_active: float
    watermark: int = MIN_TS
    # Internal: what the upstream task judged its records since its last Watermark
    # against (Watermark.judged), when ahead of ``watermark``; MIN_TS otherwise.
    judged: int = MIN_TS
    ended: bool = False
    # Next offset to process (per upstream for internal): anything below it is in the
    # state already (restored, or delivered again by a rewound consumer) and skipped.
    position: int | None = None
    blocked_on: int | None = None  # checkpoint id whose barrier this channel delivered
    barrier_timestamp: int = MIN_TS
    barrier_position: int | None = None
    buffer: list[Any] = field(default_factory=list)
    # Internal: the last sequence number taken from each writer of the upstream task on
    # this partition; a record at or below it is a second copy (kstream.kafka.internal).
    seqs: dict[str | None, int] = field(default_factory=dict)

    @property
    def tp(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    @property
    def holds_time(self) -> bool:
        """Tables are looked up, not time-aligned: they never hold the watermark back."""
        return self.kind is not InputKind.TABLE

    def idle(self, now: float) -> bool:
        return self.idle_timeout_s is not None and now - self.last_active >= self.idle_timeout_s

    def describe(self) -> str:
        where = f"{self.topic}[{self.partition}]"
        return where if self.upstream is None else f"{where} from {self.upstream}"
