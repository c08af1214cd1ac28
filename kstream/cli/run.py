"""`kstream run`: a whole job in one command (coordinator + worker), on the local broker by default."""

from __future__ import annotations

import logging
import sys
import threading
from pathlib import Path
from typing import Any

import click

from kstream.cli.options import build_job_config, job_options, pop_job_options
from kstream.config import ConfigError

log = logging.getLogger(__name__)


@click.command()
@click.argument("topology", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--bootstrap",
    "-b",
    envvar="KSTREAM_BOOTSTRAP",
    default=None,
    help="Kafka bootstrap servers [default: the local broker of `kstream dev kafka`, "
    "started if it is not running].",
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
    help="Exit 0 once no input arrived for SECONDS and all output is committed.",
)
def run(
    topology: str, bootstrap: str | None, bounded: bool, stop_when_idle: float | None, **kwargs: Any
) -> None:
    """Run a whole job in one process: coordinator + one worker.

    The same job can later be spread over `kstream coordinator` + `kstream worker`
    processes with the same app id: state and progress are in the checkpoint store.
    """
    from kstream.checkpoint.run import run_coordinator
    from kstream.job import ensure_job_topics, load_topology, plan_live
    from kstream.worker import Worker, install_signal_handlers

    opts = pop_job_options(kwargs)
    if bootstrap is None:
        bootstrap = _local_broker()
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
    coordinator_code: list[int] = []
    thread = None
    if cfg.checkpointing.enabled:
        thread = threading.Thread(
            target=lambda: coordinator_code.append(
                run_coordinator(cfg, job.plan.expected_tasks, should_stop=w.stop_event.is_set)
            ),
            name="coordinator",
            daemon=True,
        )
        thread.start()
    code = w.run()
    w.stop_event.set()
    if thread is not None:
        thread.join(30)
    if coordinator_code and coordinator_code[0] != 0:
        code = code or coordinator_code[0]
    sys.exit(code)


def _local_broker() -> str:
    """The address of the local dev broker, started (detached) if it is not running."""
    from kstream.cli.dev import DEFAULT_STATE_DIR
    from kstream.kafka.localbroker import BrokerRecord, LocalBroker, LocalBrokerError

    state_dir = Path(DEFAULT_STATE_DIR)
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
