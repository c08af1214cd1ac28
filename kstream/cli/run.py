"""`kstream run`: a whole job in one command (coordinator + worker), on the local broker by default."""

from __future__ import annotations

import logging
import sys
from typing import Any

import click

from kstream.cli.common import bootstrap_option, dev_state_dir
from kstream.cli.options import (
    job_options,
    metrics_options,
    pop_job_options,
    run_options,
    start_observability,
)
from kstream.cli.startup import prepare_job, start_worker
from kstream.dev.localbroker import BrokerRecord, LocalBroker, LocalBrokerError
from kstream.hosting.embedded import run_embedded
from kstream.hosting.signals import install_signal_handlers, worker_stop
from kstream.hosting.tuning import raise_open_files_limit, tune_gc
from kstream.worker.loop import Worker

log = logging.getLogger(__name__)


@click.command()
@click.argument("topology", type=click.Path(exists=True, dir_okay=False))
@bootstrap_option(more=", started if not running")
@job_options
@run_options
@metrics_options
def run(
    topology: str,
    bootstrap: str | None,
    bounded: bool,
    stop_when_idle: float | None,
    metrics_port: str,
    metrics_host: str,
    **kwargs: Any,
) -> None:
    """Run a whole job in one process: coordinator + one worker.

    The same job can later be spread over `kstream coordinator` + `kstream worker`
    processes with the same app id: state and progress are in the checkpoint store.
    """
    signals = install_signal_handlers()  # first: a TERM during start-up exits cleanly
    raise_open_files_limit()  # before any task opens its files
    job = prepare_job(
        topology,
        bootstrap,
        pop_job_options(kwargs),
        bounded=bounded,
        default_bootstrap=_local_broker,
    )
    start_observability(job.config.app_id, "worker+coordinator", metrics_port, metrics_host)
    w = start_worker(lambda: Worker(job, stop_when_idle=stop_when_idle))
    signals.attach(worker_stop(w))
    tune_gc()
    sys.exit(run_embedded(w))


def _local_broker() -> str:
    """The address of the local dev broker, started (detached) if it is not running."""
    state_dir = dev_state_dir()
    record = BrokerRecord.read(state_dir)
    if record is not None and record.is_running():
        return record.bootstrap
    click.echo("starting the local Kafka broker (kstream dev kafka start)...", err=True)
    broker = LocalBroker(state_dir / "data", detach=True)
    try:
        broker.start()
    except LocalBrokerError as e:
        raise click.ClickException(str(e)) from e
    broker.record().write(state_dir)
    click.echo(
        f"Kafka {broker.kafka_version} at {broker.bootstrap}; stop it with `kstream dev kafka stop`",
        err=True,
    )
    return broker.bootstrap
