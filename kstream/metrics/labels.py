"""Bounded label values: free-text reasons mapped onto small fixed sets.

A reason string ("checkpoint 7 timed out after 60s: no acknowledgement from tasks
...") is for people; a metric label must come from a short, fixed list or the
number of time series grows without bound. Each function here maps a reason onto
its list; anything unrecognised is ``other``. The fast tests drive the real
coordinator and task code through each path and check the label, so a reworded
message cannot silently fall into ``other``.
"""

from __future__ import annotations

import re

CHECKPOINT_REASONS = (
    "timeout",
    "declined",
    "metadata_write_failed",
    "subsumed",
    "failover",
    "coordinator_restarted",
    "job_failed",
    "job_stopped",
    "other",
)
RESTART_CAUSES = (
    "start",
    "task_failed",
    "store_unreachable",
    "worker_lost",
    "worker_stopped",
    "rebalance",
    "handover",
    "restore_timeout",
    "coordinator_restarted",
    "other",
)
DEAD_LETTER_REASONS = ("deserialize", "timestamp", "internal_record", "operator", "other")

# Anchored at the start of the reason: a quoted cause further on (a decline whose own
# reason mentions a timeout) must not change the label.
_CHECKPOINT_PATTERNS = tuple(
    (re.compile(p), label)
    for p, label in (
        (r"job failover: ", "failover"),
        (r"subsumed by checkpoint ", "subsumed"),
        (r"coordinator restarted", "coordinator_restarted"),
        (r"job failed", "job_failed"),
        (r"job stopped: ", "job_stopped"),
        (r"checkpoint \d+ timed out after ", "timeout"),
        (r"checkpoint \d+ declined by task ", "declined"),
        (r"checkpoint \d+: writing its metadata failed", "metadata_write_failed"),
    )
)
_RESTART_PATTERNS = tuple(
    (re.compile(p), label)
    for p, label in (
        (r"job start", "start"),
        (r"hand-over at checkpoint \d+: ", "handover"),
        (r"coordinator restarted", "coordinator_restarted"),
        (r"restore of attempt \d+ not finished within ", "restore_timeout"),
        (r"task \S+ failed on \S+: restore failed \(store unreachable\)", "store_unreachable"),
        (r"task \S+ failed on ", "task_failed"),
        (r"worker \S+ lost: ", "worker_lost"),
        (r"worker \S+ stopped \(", "worker_stopped"),
        (r"worker \S+ was assigned task ", "rebalance"),
        (r"worker \S+ no longer runs its tasks", "rebalance"),
        (r"consumer group generation changed", "rebalance"),
        (r"worker \S+ runs tasks ", "rebalance"),
    )
)


def _first_match(reason: str, patterns: tuple[tuple[re.Pattern[str], str], ...]) -> str:
    for pattern, label in patterns:
        if pattern.match(reason):
            return label
    return "other"


def checkpoint_reason(reason: str) -> str:
    """Why a checkpoint failed or was aborted, as one of :data:`CHECKPOINT_REASONS`."""
    return _first_match(reason, _CHECKPOINT_PATTERNS)


def restart_cause(reason: str) -> str:
    """Why the job was restored, as one of :data:`RESTART_CAUSES`."""
    return _first_match(reason, _RESTART_PATTERNS)


def dead_letter_reason(reason: str) -> str:
    """Why a record was dead-lettered, as one of :data:`DEAD_LETTER_REASONS`."""
    if reason.startswith("malformed internal record"):
        return "internal_record"
    if reason.startswith("operator "):
        return "operator"  # a user function raised (on_error="dead_letter")
    if "timestamp" in reason:
        return "timestamp"
    if reason:
        # Source serdes raise SerdeError; its message is the rest of the reason.
        return "deserialize"
    return "other"
