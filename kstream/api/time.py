"""Event-time assignment at the sources: timestamp extractors and watermark strategy."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kstream.api.windows import check_duration

TimestampExtractor = Callable[[Any, int], int]
"""``extractor(value, kafka_timestamp_ms) -> event_time_ms``: an ``int`` within
``[MIN_TIMESTAMP, MAX_TIMESTAMP]``; anything else dead-letters the record."""

MIN_TIMESTAMP = 0
"""Smallest record timestamp (ms) kstream accepts at a source: Kafka's (it rejects
negative timestamps other than -1, "none")."""
MAX_TIMESTAMP = 2**63 - 1
"""Largest record timestamp (ms) accepted at a source: Kafka's (a signed 64-bit long)."""


@dataclass(frozen=True)
class WatermarkStrategy:
    """Per source partition: watermark = max timestamp seen - ``max_out_of_orderness_ms``.

    Records with a timestamp below the current watermark are late. A partition with
    no record for ``idle_timeout_s`` seconds of processing time is *idle* and stops
    holding the task's watermark back until it delivers again (``None`` = never idle).

    Watermark alignment (on by default): a partition of this source whose watermark
    is more than ``max_drift_ms`` ahead of the slowest partition that still has
    records to read is paused until that one catches up, so a catch-up reads the
    partitions in step as a live run does (``None`` turns it off; see
    ``kstream.runtime.watermark_alignment``).
    """

    max_out_of_orderness_ms: int = 0
    idle_timeout_s: float | None = None
    max_drift_ms: int | None = 60_000

    def __post_init__(self) -> None:
        check_duration("max_out_of_orderness_ms", self.max_out_of_orderness_ms)
        if self.max_drift_ms is not None:
            check_duration("max_drift_ms", self.max_drift_ms)
        if self.idle_timeout_s is not None and self.idle_timeout_s <= 0:
            raise ValueError(f"idle_timeout_s must be > 0 or None, got {self.idle_timeout_s}")
