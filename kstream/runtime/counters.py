"""A task's own counters (``Task.metrics``): task-wide totals of what happened to its
input. Operators add to them as they go; the worker's metrics export some of them
(``kstream.metrics.worker``) and ``kstream.testing`` hands them to tests."""

from __future__ import annotations

#: Each counter, and what it counts.
TASK_COUNTERS: dict[str, str] = {
    "records_in": "records decoded from the task's inputs",
    "late_dropped": "records behind the watermark plus allowed lateness, dropped",
    "late_side_output": "the same, sent to a window's late() output",
    "stale_dropped": "internal records of a failed attempt",
    "duplicates_dropped": "second copies of internal records (by writer and seq)",
    "restored_skipped": "records below a restored or already processed position",
    "dead_letters": "records sent to the dead-letter topic",
    "operator_errors": "records a user function raised on (on_error=dead_letter)",
    "join_unmatched": "join records without a match",
    "null_values_skipped": "records with a None value, which aggregations skip (Kafka Streams')",
    "stale_barriers": "barriers of an aborted checkpoint or an older attempt",
}


def task_counters() -> dict[str, int]:
    """Every counter of :data:`TASK_COUNTERS` at zero."""
    return dict.fromkeys(TASK_COUNTERS, 0)
