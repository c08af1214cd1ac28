"""Deliberately broken sinks, to show the crash tests fail when exactly-once breaks.

Loaded into the job's processes through ``JobSettings.preamble`` by
``python -m integration.e2e.teeth``; never by kstream itself.
"""

from __future__ import annotations

from typing import Any

from kstream.kafka import exactly_once_sink as sink
from kstream.worker import tasks


def sink_ignores_marker() -> None:
    """Recovery republishes epochs its commit marker says are out: duplicates."""

    def no_marker(self: sink.ExactlyOnceSink) -> None:
        return None

    def no_markers(*args: Any) -> dict[str, None]:
        return dict.fromkeys(args[2])  # (bootstrap, app, tasks, ...): none read

    sink.ExactlyOnceSink.read_marker = no_marker  # type: ignore[method-assign]
    # a worker reads the markers of the tasks it restores in one pass
    tasks.read_latest_markers = no_markers  # type: ignore[assignment]


def sink_forgets_buffer() -> None:
    """Recovery drops the snapshot's uncommitted epochs: lost output."""
    original = sink.ExactlyOnceSink.recover

    def recover(
        self: sink.ExactlyOnceSink,
        _blob: bytes | None,
        attempt: int,
        *,
        keep: bool = False,
        marker: Any = sink.NOT_READ,
    ) -> Any:
        return original(self, None, attempt, marker=marker)  # (a kept buffer too)

    sink.ExactlyOnceSink.recover = recover  # type: ignore[assignment,method-assign]
