"""`kstream worker`: one process of a job's consumer group."""

from __future__ import annotations

import sys
from typing import Any

import click

from kstream.cli.options import build_job_config, job_options, pop_job_options
from kstream.config import ConfigError, Guarantee


@click.command()
@click.argument("topology", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--bootstrap",
    "-b",
    envvar="KSTREAM_BOOTSTRAP",
    required=True,
    help="Kafka bootstrap servers [env KSTREAM_BOOTSTRAP].",
)
@job_options
@click.option(
    "--bounded",
    is_flag=True,
    help="Batch run: read every source up to its end offsets at start, store the final state, exit 0.",
)
@click.option(
    "--stop-when-idle",
    type=float,
    default=None,
    metavar="SECONDS",
    help="Exit 0 once no input arrived for SECONDS and a checkpoint taken after the last "
    "input completed (all output committed).",
)
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
    bootstrap: str,
    bounded: bool,
    stop_when_idle: float | None,
    session_timeout: float,
    debug_pause_at: str | None,
    **kwargs: Any,
) -> None:
    """Run the tasks of TOPOLOGY that the consumer group assigns to this process.

    Start any number of workers (and one `kstream coordinator` when checkpointing is
    on); partitions are spread over them, and any change rolls the job back to the
    last completed checkpoint. Exits 1 with the reason when the job fails.
    """
    from kstream.job import ensure_job_topics, load_topology, plan_live
    from kstream.worker import PausePoint, Worker, WorkerSettings, install_signal_handlers

    opts = pop_job_options(kwargs)
    try:
        topo = load_topology(topology)
        cfg = build_job_config(opts, bootstrap=bootstrap, default_app_id=topo.name, bounded=bounded)
        default_guarantee = Guarantee(opts["guarantee"]) if opts["guarantee"] else None
        job = plan_live(topo, cfg, default_guarantee=default_guarantee)
        ensure_job_topics(job)
        try:
            pause = PausePoint(debug_pause_at) if debug_pause_at else None
        except ValueError as e:
            raise ConfigError(f"--debug-pause-at: {e}") from e
        settings = WorkerSettings(session_timeout_s=session_timeout, pause_at=pause)
    except ConfigError as e:
        click.echo(f"kstream: {e}", err=True)
        sys.exit(2)
    w = Worker(job, stop_when_idle=stop_when_idle, settings=settings)
    install_signal_handlers(w)
    sys.exit(w.run())
