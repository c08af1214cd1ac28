"""`kstream coordinator`: run the checkpoint coordinator of one job."""

from __future__ import annotations

import signal
import sys
from types import FrameType
from typing import Any

import click

from kstream.cli.options import (
    bootstrap_option,
    build_job_config,
    connect,
    job_options,
    metrics_options,
    pop_job_options,
    start_observability,
)
from kstream.config import ConfigError
from kstream.job import load_topology, plan_live
from kstream.plan.fingerprint import PlanFingerprint, fingerprint
from kstream.plan.operators import describe
from kstream.process.coordinator import EXIT_USAGE, run_coordinator


@click.command()
@click.argument("topology", required=False, type=click.Path(exists=True, dir_okay=False))
@bootstrap_option()
@job_options
@click.option(
    "--tasks",
    default=None,
    help="Comma-separated task ids that must acknowledge (instead of planning TOPOLOGY).",
)
@click.option(
    "--heartbeat-timeout",
    type=float,
    default=10.0,
    show_default=True,
    help="Seconds without a worker heartbeat before it counts as lost.",
)
@metrics_options
def coordinator(
    topology: str | None,
    bootstrap: str | None,
    tasks: str | None,
    heartbeat_timeout: float,
    metrics_port: str,
    metrics_host: str,
    **kwargs: Any,
) -> None:
    """Trigger and commit a job's checkpoints; drive failover.

    Plans TOPOLOGY (or takes --tasks) to know every task that must acknowledge.

    Exactly one coordinator is active per app id: a new one fences the previous one.
    Exits 1 with the reason when the job fails hard or another coordinator takes over.
    """
    opts = pop_job_options(kwargs)
    try:
        if tasks:
            if opts["app_id"] is None:
                raise ConfigError("--tasks needs --app-id")
            cfg = build_job_config(opts, bootstrap=bootstrap, default_app_id=opts["app_id"])
            expected = frozenset(t.strip() for t in tasks.split(",") if t.strip())
            description = None  # no plan: restored state is not checked
            connect(cfg)
            fp: PlanFingerprint | None = None  # nor workers' plans
        elif topology:
            topo = load_topology(topology)
            cfg = build_job_config(opts, bootstrap=bootstrap, default_app_id=topo.name)
            connect(cfg)
            plan = plan_live(topo, cfg).plan
            expected, description = plan.expected_tasks, describe(plan)
            fp = fingerprint(plan)
        else:
            raise click.UsageError("give TOPOLOGY or --tasks")
    except ConfigError as e:
        click.echo(f"kstream: {e}", err=True)
        sys.exit(EXIT_USAGE)

    start_observability(cfg.app_id, "coordinator", metrics_port, metrics_host)
    stop = False

    def on_signal(_sig: int, _frame: FrameType | None) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    code = run_coordinator(
        cfg,
        expected,
        heartbeat_timeout=heartbeat_timeout,
        should_stop=lambda: stop,
        description=description,
        plan=fp,
    )
    sys.exit(code)
