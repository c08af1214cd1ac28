"""Counting successive failed checkpoints against ``tolerable_failures`` (docs/design.md §5.8)."""

from __future__ import annotations


class CheckpointFailureManager:
    """Says when successive checkpoint failures become a hard failure.

    A checkpoint counts once however many ways it failed; a success resets the
    count; a failure of a checkpoint older than the newest success is not counted
    (it is already subsumed). Aborts caused by a failover are not reported here.
    """

    def __init__(self, tolerable_failures: int) -> None:
        self.tolerable_failures = tolerable_failures
        self._failed: set[int] = set()
        self._last_success = 0

    @property
    def successive_failures(self) -> int:
        """Failed checkpoints since the last success."""
        return len(self._failed)

    def record_failure(self, checkpoint_id: int) -> bool:
        """Count the failure of ``checkpoint_id``; True when the job must fail hard."""
        if checkpoint_id > self._last_success:
            self._failed.add(checkpoint_id)
        return len(self._failed) > self.tolerable_failures

    def record_success(self, checkpoint_id: int) -> None:
        """A checkpoint completed: the successive count starts over."""
        self._last_success = max(self._last_success, checkpoint_id)
        self._failed = {n for n in self._failed if n > self._last_success}
