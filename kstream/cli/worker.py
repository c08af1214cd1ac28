"""`kstream worker`: one process of a job's consumer group."""

from __future__ import annotations

import sys
from typing import Any

import click

from kstream.cli.options import build_job_config, job_options, pop_job_options
from kstream.config import ConfigError


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
def worker(
    topology: str, bootstrap: str, bounded: bool, stop_when_idle: float | None, **kwargs: Any
) -> None:
    """Run the tasks of TOPOLOGY that the consumer group assigns to this process.

    Start any number of workers (and one `kstream coordinator` when checkpointing is
    on); partitions are spread over them, and any change rolls the job back to the
    last completed checkpoint. Exits 1 with the reason when the job fails.
    """
    from kstream.job import ensure_job_topics, load_topology, plan_live
    from kstream.worker import Worker, install_signal_handlers

    opts = pop_job_options(kwargs)
    try:
        topo = load_topology(topology)
        cfg = build_job_config(opts, bootstrap=bootstrap, default_app_id=topo.name, bounded=bounded)
        job = plan_live(topo, cfg)
        ensure_job_topics(job)
    except ConfigError as e:
        click.echo(f"kstream: {e}", err=True)
        sys.exit(2)
    w = Worker(job, stop_when_idle=stop_when_idle)
    install_signal_handlers(w)
    sys.exit(w.run())
