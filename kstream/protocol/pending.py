"""A triggered checkpoint collecting acknowledgements from every expected task."""

from __future__ import annotations

import logging
from collections.abc import Callable
from enum import StrEnum

from kstream.checkpointstorage.history import CheckpointFailure, CheckpointStatus
from kstream.checkpointstorage.metadata import CheckpointMetadata, TaskSnapshot
from kstream.logs import ctx

log = logging.getLogger(__name__)

NAMED_TASKS = 20  # tasks a timed-out checkpoint's reason names (the rest are counted)


class AckOutcome(StrEnum):
    """Why a pending checkpoint did not take an acknowledgement."""

    DUPLICATE = "duplicate"  # the task already acknowledged; the first one counts
    UNEXPECTED_TASK = "unexpected_task"  # not a task of the plan


class PendingCheckpoint:
    """Checkpoint ``checkpoint_id`` of ``attempt``, triggered at ``trigger_time`` (epoch s)."""

    def __init__(
        self, checkpoint_id: int, attempt: int, trigger_time: float, expected: frozenset[str]
    ) -> None:
        self.checkpoint_id = checkpoint_id
        self.attempt = attempt
        self.trigger_time = trigger_time
        self.expected = expected
        self.acks: dict[str, TaskSnapshot] = {}

    def acknowledge(
        self, snapshots: dict[str, TaskSnapshot], now: float
    ) -> list[tuple[str, AckOutcome]]:
        """Record the acknowledged snapshots of one message (of this checkpoint and attempt:
        the caller checks that), task -> snapshot, each with the message's delay; the
        tasks not accepted, with why."""
        delay = round((now - self.trigger_time) * 1000.0, 3)  # (one message: one delay)
        expected, acks = self.expected, self.acks
        refused: list[tuple[str, AckOutcome]] = []
        for task_id, snapshot in snapshots.items():
            if task_id not in expected:
                refused.append((task_id, AckOutcome.UNEXPECTED_TASK))
            elif task_id in acks:
                refused.append((task_id, AckOutcome.DUPLICATE))
            else:
                acks[task_id] = snapshot.delayed(delay)
        return refused

    @property
    def missing(self) -> list[str]:
        """Expected tasks that have not acknowledged yet, sorted."""
        return sorted(self.expected - self.acks.keys())

    @property
    def is_complete(self) -> bool:
        """Whether every expected task acknowledged (asked after every ack: O(1), not the
        set difference of ``missing``, which made a checkpoint's acks quadratic in tasks)."""
        return len(self.acks) == len(self.expected)  # (acks holds expected tasks only)

    def handles(self) -> tuple[str, ...]:
        """Snapshot handles acknowledged so far (what an abort must clean up)."""
        return tuple(sorted(s.handle for s in self.acks.values()))

    def to_metadata(self, now: float) -> CheckpointMetadata:
        """The completed checkpoint, completed at ``now``; only valid when complete."""
        if not self.is_complete:
            raise RuntimeError(
                f"checkpoint {self.checkpoint_id} is not complete: missing {self.missing}"
            )
        return CheckpointMetadata(
            checkpoint_id=self.checkpoint_id,
            attempt=self.attempt,
            trigger_time=self.trigger_time,
            complete_time=now,
            tasks=dict(self.acks),
        )

    def ended(self, reason: str, now: float, *, failed: bool) -> CheckpointFailure:
        """This checkpoint failed (``failed``: it counts) or was aborted at ``now``: logged
        (a failure is a warning; an abort — subsumed, or cancelled by a failover — is
        normal), and its record for the history."""
        status = CheckpointStatus.FAILED if failed else CheckpointStatus.ABORTED
        log.log(
            logging.WARNING if failed else logging.INFO,
            "checkpoint %d %s (attempt %d): %s",
            self.checkpoint_id,
            status,
            self.attempt,
            reason,
            extra=ctx(attempt=self.attempt, checkpoint=self.checkpoint_id),
        )
        return CheckpointFailure(
            self.checkpoint_id,
            self.attempt,
            status,
            reason,
            self.trigger_time,
            now,
            dict(self.acks),
            tuple(self.missing),
        )

    def timeout_reason(self, timeout: float, ran: Callable[[list[str]], list[str]]) -> str:
        """Why it timed out after ``timeout`` s, naming ``NAMED_TASKS`` of the missing
        tasks (the rest counted); ``ran``: where tasks last ran, one line each."""
        missing = self.missing
        named = missing[:NAMED_TASKS]  # thousands of names would make one unreadable line
        seen = ran(named)
        more = f" and {len(missing) - len(named)} more" if len(missing) > len(named) else ""
        where = f" ({'; '.join(seen)})" if seen else ""
        return (
            f"checkpoint {self.checkpoint_id} timed out after {timeout:g}s: "
            f"no acknowledgement from tasks {', '.join(named)}{more}{where}"
        )
