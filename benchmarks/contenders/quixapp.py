"""Building blocks of the Quix Streams contenders (run in ``benchmarks/.venv-quix``).

An ``Application`` configured the way Quix's documentation shows, plus a stop
condition: ``on_message_processed`` (Quix's documented per-message hook) tracks the
offsets against the end offsets captured by the harness and calls ``app.stop()``
once every partition is done; ``app.run()`` then commits its final checkpoint and
returns.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from quixstreams import Application

from benchmarks.workloads import Progress, Report


def make_app(a: argparse.Namespace) -> tuple[Application, Progress | None]:
    """An ``Application`` for the contender arguments ``a`` and its progress tracker.

    Without ``--forever`` the app stops itself at ``--end-offsets``.
    """
    consumer_extra: dict[str, Any] = {}
    if a.instance_id:
        consumer_extra["group.instance.id"] = a.instance_id
    progress = Progress(a.end_offsets) if a.end_offsets is not None and not a.forever else None
    holder: list[Application] = []

    def on_processed(_topic: str, partition: int, offset: int) -> None:
        if progress is not None and progress.observe(partition, offset):
            holder[0].stop()

    kwargs: dict[str, Any] = {}
    if a.state_dir:  # also for stateless apps: Quix creates its state dir regardless
        kwargs["state_dir"] = a.state_dir
    app = Application(
        broker_address=a.bootstrap,
        consumer_group=a.group,
        auto_offset_reset="earliest",
        processing_guarantee=a.guarantee,
        commit_interval=a.commit_interval,
        consumer_extra_config=consumer_extra,
        on_message_processed=on_processed,
        loglevel="WARNING",
        **kwargs,
    )
    holder.append(app)
    return app, progress


def run_and_report(name: str, app: Application, progress: Progress | None) -> None:
    """``app.run()`` to the stop condition, then print the report line."""
    app.run()
    t_end = time.time()
    if progress is None or progress.t_first is None or not progress.done:
        raise SystemExit(f"{name}: stopped before reaching the end offsets")
    Report(name, progress.total, -1, progress.t_first, t_end).emit()
