"""When the coordinator may trigger the next checkpoint (docs/design.md §5): an interval
after the last trigger, at once when a worker asked for one, never more than
``max_concurrent`` in flight, and with a minimum pause measured from the end of the
previous checkpoint. Pure: fed the times, it says when the next one is due."""

from __future__ import annotations

from kstream.config import CheckpointingConfig


class TriggerSchedule:
    """The last trigger, a worker's request, the end of the previous checkpoint."""

    def __init__(self, config: CheckpointingConfig) -> None:
        self.config = config
        self.last_trigger = 0.0
        self.requested = False  # a worker asked for a checkpoint before the interval
        self.last_finish = float("-inf")  # end of the previous checkpoint (min_pause)

    def interval_from(self, now: float) -> None:
        """The next interval counts from ``now`` (a start, a resume)."""
        self.last_trigger = now

    def request(self) -> None:
        """A checkpoint was asked for: due at once."""
        self.requested = True

    def drop_request(self) -> None:
        self.requested = False

    def triggered(self, now: float) -> None:
        self.last_trigger = now
        self.requested = False

    def finished(self, now: float) -> None:
        """A checkpoint completed, failed or was aborted at ``now``."""
        self.last_finish = now

    def due(self, in_flight: int) -> float | None:
        """When the next checkpoint may be triggered with ``in_flight`` ones not finished
        (None: not until something happens)."""
        if in_flight >= self.config.max_concurrent:
            return None
        due = float("-inf") if self.requested else self.last_trigger + self.config.interval
        # A minimum pause is measured from the end of the previous checkpoint, so
        # with one it never overlaps another (as in Flink).
        if self.config.min_pause:
            if in_flight:
                return None
            due = max(due, self.last_finish + self.config.min_pause)
        return due
