"""Delivery of a worker's internal records and events (docs/design.md §2, §3).

Writing: the worker's one producer for internal topics reports failed deliveries only
(``delivery.report.only.error``: a callback per delivered record would cost more than
producing it) to a :class:`DeliveryFailures`. A record the broker refuses for good (larger
than the topic's ``max.message.bytes``, or not delivered within ``message.timeout.ms``)
would otherwise be lost while the records and barriers after it go through, and a
checkpoint complete without it. So a snapshot's acknowledgement waits until every
internal record written so far is delivered (asked without blocking the processing, as
an outage may last), source offsets are committed only after a flush, and a failure
raises :class:`InternalDeliveryError` in the task that finds it: with checkpoints the
job rolls back to its last completed checkpoint (which cannot hold the lost record's
effects) and replays it, so a passing cause (a partition without a leader for longer
than ``message.timeout.ms``) heals by itself; without, the worker stops before
committing offsets past it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

__all__ = ["DeliveryFailures", "InternalDeliveryError"]


class InternalDeliveryError(RuntimeError):
    """An internal record or event was not delivered: the task that finds it fails before
    anything after it is acknowledged or committed."""


class DeliveryFailures:
    """Failed deliveries of internal records and events, by the attempt that wrote them:
    how many and the first one (topic, partition, the broker's or the client's reason).
    ``of(attempt)`` is the delivery callback of that attempt's records (a producer that
    reports failures only calls it for those)."""

    __slots__ = ("_callbacks", "failed")

    def __init__(self) -> None:
        self.failed: dict[int, tuple[int, str]] = {}
        self._callbacks: dict[int, Callable[[Any, Any], None]] = {}

    def of(self, attempt: int) -> Callable[[Any, Any], None]:
        """The delivery callback for records written in ``attempt``."""
        cb = self._callbacks.get(attempt)
        if cb is None:
            cb = self._callbacks[attempt] = partial(self._delivered, attempt)
        return cb

    def _delivered(self, attempt: int, err: Any, msg: Any) -> None:
        if err is None:
            return
        count, first = self.failed.get(attempt, (0, ""))
        reason = f"delivery to {msg.topic()} [{msg.partition()}] failed: {err.name()}: {err.str()}"
        self.failed[attempt] = (count + 1, first or reason)

    def check(self, attempt: int = 0) -> None:
        """InternalDeliveryError if a record written in ``attempt`` or later failed.
        Failures of earlier attempts are forgotten: a restore made their records stale
        (read and dropped), and the restored attempt writes them again."""
        for table in (self.failed, self._callbacks):
            for old in [a for a in table if a < attempt]:
                del table[old]
        if self.failed:
            count, first = self.failed[max(self.failed)]
            raise InternalDeliveryError(
                f"{first} ({count} record(s)). Nothing after them is acknowledged or "
                f"committed: the job rolls back to its last completed checkpoint, which "
                f"replays them (without checkpoints the worker stops). For a record too "
                f"large, raise the internal topic's max.message.bytes"
            )
