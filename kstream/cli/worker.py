"""`kstream worker`: one process of a job's consumer group."""

from __future__ import annotations

import sys
from typing import Any

import click

from kstream.cli.options import (
    bootstrap_option,
    job_options,
    metrics_options,
    pop_job_options,
    prepare_job,
    run_options,
    start_observability,
)
from kstream.process.signals import install_signal_handlers
from kstream.process.tuning import tune_gc
from kstream.worker.loop import Worker
from kstream.worker.settings import PausePoint, WorkerSettings


@click.command()
@click.argument("topology", type=click.Path(exists=True, dir_okay=False))
@bootstrap_option()
@job_options
@run_options
@metrics_options
@click.option(
    "--session-timeout",
    type=float,
    default=10.0,
    show_default=True,
    metavar="SECONDS",
    help="Consumer-group session timeout: how soon a dead worker's partitions move on.",
)
@click.option(
    "--debug-pause-at",
    type=click.Choice(["after-snapshot", "before-sink-commit"]),
    default=None,
    hidden=True,
    help="Crash tests only: block at this point (after-snapshot, before-sink-commit).",
)
def worker(
    topology: str,
    bootstrap: str | None,
    bounded: bool,
    stop_when_idle: float | None,
    metrics_port: str,
    metrics_host: str,
    session_timeout: float,
    debug_pause_at: str | None,
    **kwargs: Any,
) -> None:
    """Run a job's tasks as one consumer-group worker.

    Start any number of workers (and one `kstream coordinator` when checkpointing is
    on); partitions are spread over them, and any change rolls the job back to the
    last completed checkpoint. Exits 1 with the reason when the job fails.
    """
    job = prepare_job(topology, bootstrap, pop_job_options(kwargs), bounded=bounded)
    start_observability(job.config.app_id, "worker", metrics_port, metrics_host)
    pause = PausePoint(debug_pause_at) if debug_pause_at else None
    settings = WorkerSettings(session_timeout_s=session_timeout, pause_at=pause)
    w = Worker(job, stop_when_idle=stop_when_idle, settings=settings)
    install_signal_handlers(w)
    tune_gc()
    sys.exit(w.run())
