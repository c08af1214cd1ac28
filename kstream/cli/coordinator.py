"""`kstream coordinator`: run the checkpoint coordinator of one job."""

from __future__ import annotations

import runpy
import signal
import sys
from types import FrameType

import click

from kstream.config import CheckpointingConfig, ConfigError, JobConfig, RestartStrategy


def _tasks_from_topology(path: str, app_id: str, bootstrap: str) -> frozenset[str]:
    """Every task of the planned topology in ``path`` (module variable ``topology``)."""
    from kstream.kafka.clients import make_admin, partition_counts
    from kstream.plan import plan_job

    module = runpy.run_path(path)
    topology = module.get("topology")
    if topology is None:
        raise click.UsageError(f"{path} defines no module variable 'topology'")
    sources = {n.params["topic"] for n in topology.nodes if n.kind == "source"}
    counts = partition_counts(make_admin(bootstrap), sources)
    return frozenset(plan_job(topology, app_id, counts).expected_tasks)


@click.command()
@click.argument("topology", required=False, type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--bootstrap", envvar="KSTREAM_BOOTSTRAP", required=True, help="Kafka bootstrap servers."
)
@click.option("--app-id", envvar="KSTREAM_APP_ID", required=True, help="The job's app id.")
@click.option(
    "--store",
    "store_url",
    default="file://./.kstream/checkpoints",
    show_default=True,
    help="Checkpoint store URL.",
)
@click.option(
    "--tasks",
    default=None,
    help="Comma-separated task ids that must acknowledge (instead of planning TOPOLOGY).",
)
@click.option(
    "--checkpointing/--no-checkpointing",
    default=True,
    show_default=True,
    help="Whether the job is checkpointed.",
)
@click.option(
    "--interval",
    type=float,
    default=5.0,
    show_default=True,
    help="Seconds between checkpoint triggers.",
)
@click.option(
    "--timeout",
    type=float,
    default=60.0,
    show_default=True,
    help="Seconds before an incomplete checkpoint is aborted.",
)
@click.option(
    "--min-pause",
    type=float,
    default=0.0,
    show_default=True,
    help="Minimum seconds between the end of one checkpoint and the next trigger.",
)
@click.option(
    "--max-concurrent",
    type=int,
    default=1,
    show_default=True,
    help="Maximum checkpoints in flight.",
)
@click.option(
    "--tolerable-failures",
    type=int,
    default=3,
    show_default=True,
    help="Successive failed checkpoints tolerated before the job fails.",
)
@click.option(
    "--retained",
    type=int,
    default=3,
    show_default=True,
    help="Completed checkpoints kept in the store.",
)
@click.option(
    "--max-restarts",
    type=int,
    default=10,
    show_default=True,
    help="Failovers allowed within --restart-window.",
)
@click.option(
    "--restart-window",
    type=float,
    default=600.0,
    show_default=True,
    help="Seconds over which restarts are counted.",
)
@click.option(
    "--restart-delay",
    type=float,
    default=1.0,
    show_default=True,
    help="Seconds between a failure and the restore.",
)
@click.option(
    "--restore-timeout",
    type=float,
    default=120.0,
    show_default=True,
    help="Seconds for every task to report ready after a restore.",
)
@click.option(
    "--heartbeat-timeout",
    type=float,
    default=10.0,
    show_default=True,
    help="Seconds without a worker heartbeat before it counts as lost.",
)
def coordinator(
    topology: str | None,
    bootstrap: str,
    app_id: str,
    store_url: str,
    tasks: str | None,
    checkpointing: bool,
    interval: float,
    timeout: float,
    min_pause: float,
    max_concurrent: int,
    tolerable_failures: int,
    retained: int,
    max_restarts: int,
    restart_window: float,
    restart_delay: float,
    restore_timeout: float,
    heartbeat_timeout: float,
) -> None:
    """Trigger and commit the checkpoints of the job in TOPOLOGY; drive failover.

    Exits 1 with the reason when the job fails hard or another coordinator takes over.
    """
    from kstream.checkpoint.run import EXIT_USAGE, run_coordinator

    try:
        job = JobConfig(
            app_id=app_id,
            bootstrap_servers=bootstrap,
            store_url=store_url,
            checkpointing=CheckpointingConfig(
                enabled=checkpointing,
                interval=interval,
                timeout=timeout,
                min_pause=min_pause,
                max_concurrent=max_concurrent,
                tolerable_failures=tolerable_failures,
                retained=retained,
            ),
            restart=RestartStrategy(
                max_restarts=max_restarts,
                window=restart_window,
                delay=restart_delay,
                restore_timeout=restore_timeout,
            ),
        )
    except ConfigError as e:
        click.echo(f"kstream: {e}", err=True)
        sys.exit(EXIT_USAGE)
    if tasks:
        expected = frozenset(t.strip() for t in tasks.split(",") if t.strip())
    elif topology:
        expected = _tasks_from_topology(topology, app_id, bootstrap)
    else:
        raise click.UsageError("give TOPOLOGY or --tasks")

    stop = False

    def on_signal(_sig: int, _frame: FrameType | None) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    code = run_coordinator(
        job, expected, heartbeat_timeout=heartbeat_timeout, should_stop=lambda: stop
    )
    sys.exit(code)
