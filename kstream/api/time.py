"""Event-time assignment at the sources: timestamp extractors and watermark strategy."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kstream.api.windows import check_duration

TimestampExtractor = Callable[[Any, int], int]
"""``extractor(value, kafka_timestamp_ms) -> event_time_ms``."""


@dataclass(frozen=True)
class WatermarkStrategy:
    """Per source partition: watermark = max timestamp seen - ``max_out_of_orderness_ms``.

    Records with a timestamp below the current watermark are late. A partition with
    no record for ``idle_timeout_s`` seconds of processing time is *idle* and stops
    holding the task's watermark back until it delivers again (``None`` = never idle).
    """

    max_out_of_orderness_ms: int = 0
    idle_timeout_s: float | None = None

    def __post_init__(self) -> None:
        check_duration("max_out_of_orderness_ms", self.max_out_of_orderness_ms)
        if self.idle_timeout_s is not None and self.idle_timeout_s <= 0:
            raise ValueError(f"idle_timeout_s must be > 0 or None, got {self.idle_timeout_s}")
