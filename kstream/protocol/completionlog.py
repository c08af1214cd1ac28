"""What the coordinator says about completed checkpoints: a line for the first one of an
attempt, then one summary a minute — not an INFO line per checkpoint, which at a 1 s
interval buried every other line of a long-running job. Each checkpoint is still logged
at DEBUG. Pure: fed the completion time, it returns the line to log (or None), or
logs it (``log``)."""

from __future__ import annotations

import logging
import statistics
from dataclasses import dataclass, field

from kstream.checkpointstorage.metadata import CheckpointMetadata
from kstream.logs import ctx

log = logging.getLogger(__name__)

SUMMARY_EVERY_S = 60.0


@dataclass
class CompletionLog:
    """Completions since the last line; ``completed`` returns the next INFO line, if due."""

    every_s: float = SUMMARY_EVERY_S
    _attempt: int | None = None
    _since: float = 0.0
    _ids: list[int] = field(default_factory=list)
    _durations: list[float] = field(default_factory=list)
    _bytes: int = 0

    def log(self, meta: CheckpointMetadata, now: float) -> None:
        """Log the completion of ``meta`` at DEBUG, and the INFO line if one is due."""
        n, where = meta.checkpoint_id, ctx(attempt=meta.attempt, checkpoint=meta.checkpoint_id)
        size, tasks = meta.state_size, len(meta.tasks)
        log.debug(
            "checkpoint %d completed in %.0f ms (%d bytes, %d tasks)",
            n,
            meta.duration_ms,
            size,
            tasks,
            extra=where,
        )
        line = self.completed(n, meta.attempt, meta.duration_ms, size, tasks, now)
        if line is not None:
            log.info(line, extra=where)

    def completed(
        self,
        checkpoint_id: int,
        attempt: int,
        duration_ms: float,
        size: int,
        tasks: int,
        now: float,
    ) -> str | None:
        if attempt != self._attempt:  # the first of this coordinator or of a new attempt
            self._attempt, self._since = attempt, now
            self._ids, self._durations, self._bytes = [], [], 0
            return (
                f"checkpoint {checkpoint_id} completed in {duration_ms:.0f} ms ({size} bytes, "
                f"{tasks} tasks); further completions are summarised every {self.every_s:.0f} s"
            )
        self._ids.append(checkpoint_id)
        self._durations.append(duration_ms)
        self._bytes = size
        if now - self._since < self.every_s:
            return None
        line = (
            f"{len(self._ids)} checkpoints completed in the last {now - self._since:.0f} s "
            f"({self._ids[0]}-{self._ids[-1]}; duration median "
            f"{statistics.median(self._durations):.0f} ms, max {max(self._durations):.0f} ms; "
            f"state {self._bytes} bytes)"
        )
        self._since = now
        self._ids, self._durations = [], []
        return line
