"""`kstream worker`: one process of a job's consumer group."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from typing import Any

import click

from kstream.cli.common import bootstrap_option
from kstream.cli.options import (
    job_options,
    metrics_options,
    pop_job_options,
    run_options,
    start_observability,
)
from kstream.cli.startup import prepare_job, start_worker
from kstream.hosting.coordinator import EXIT_USAGE
from kstream.hosting.election import ElectedCoordinator
from kstream.hosting.signals import install_signal_handlers, worker_stop
from kstream.hosting.startup import Coordination
from kstream.hosting.tuning import raise_open_files_limit, tune_gc
from kstream.worker.checkpointed import Checkpointed
from kstream.worker.loop import Worker
from kstream.worker.settings import PAUSE_RESUMED, PausePoint, WorkerSettings


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
    "--coordinator",
    type=click.Choice(["auto", "external"]),
    default="auto",
    show_default=True,
    envvar="KSTREAM_COORDINATOR",
    help="auto: the workers elect one of them (through Kafka) to host the coordinator, so a "
    "deployment is N identical workers; external: a `kstream coordinator` process is deployed.",
)
@click.option(
    "--heartbeat-timeout",
    type=float,
    default=10.0,
    show_default=True,
    metavar="SECONDS",
    help="With --coordinator auto: how long the coordinator waits for a worker's heartbeat.",
)
@click.option(
    "--standby-replicas",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    metavar="N",
    help="Keep local copies of the tasks this worker would take over if up to N other workers "
    "left, refreshed from the checkpoint store as checkpoints complete: a failover or move "
    "restores them from local files (docs/operations.md).",
)
@click.option(
    "--standby-bandwidth",
    type=click.FloatRange(min=0),
    default=64.0,
    show_default=True,
    metavar="MB_PER_S",
    help="With --standby-replicas: the standby copies' downloads take at most this many "
    "MB/s (0: no limit).",
)
@click.option(
    "--debug-pause-at",
    type=click.Choice(["after-snapshot", "before-sink-commit"]),
    default=None,
    hidden=True,
    help="Crash tests only: block at this point (after-snapshot, before-sink-commit) until killed, or once until SIGUSR1.",
)
def worker(
    topology: str,
    bootstrap: str | None,
    bounded: bool,
    stop_when_idle: float | None,
    metrics_port: str,
    metrics_host: str,
    session_timeout: float,
    coordinator: str,
    heartbeat_timeout: float,
    standby_replicas: int,
    standby_bandwidth: float,
    debug_pause_at: str | None,
    **kwargs: Any,
) -> None:
    """Run a job's tasks as one consumer-group worker.

    Start any number of workers; partitions are spread over them. A worker that
    starts or stops (SIGTERM) hands its tasks over at a checkpoint; a crash rolls the
    job back to the last completed checkpoint. With checkpointing on, one
    of them hosts the coordinator (elected; another takes over within 6 s, the
    election group's session, when it dies; cooperatively within about 1.5 s of its
    silence) unless --coordinator external says a
    `kstream coordinator` runs. Exits 1 with the reason when the job fails.
    """
    signals = install_signal_handlers()  # first: a TERM during start-up exits cleanly
    raise_open_files_limit()  # before any task opens its files
    job = prepare_job(topology, bootstrap, pop_job_options(kwargs), bounded=bounded)
    start_observability(job.config.app_id, "worker", metrics_port, metrics_host)
    pause = PausePoint(debug_pause_at) if debug_pause_at else None
    if pause is not None:  # a paused test worker goes on at SIGUSR1
        signal.signal(signal.SIGUSR1, lambda *_: PAUSE_RESUMED.set())
    settings = WorkerSettings(
        session_timeout_s=session_timeout,
        pause_at=pause,
        standby_replicas=standby_replicas,
        standby_bandwidth=standby_bandwidth * 1e6 or None,
    )
    w = start_worker(lambda: Worker(job, stop_when_idle=stop_when_idle, settings=settings))
    signals.attach(worker_stop(w))
    tune_gc()
    election = None
    if coordinator == "auto" and w.checkpointed and not w.cfg.bounded:
        election = ElectedCoordinator(
            w.cfg,
            Coordination.of(w.plan),
            heartbeat_timeout=heartbeat_timeout,
            restart_delay=w.cfg.restart.delay,
            on_refused=w.stop_event.set,
            member=cooperative_member(w),
        )
        election.start()
    code = w.run()
    if election is not None:
        election.stop()  # after the worker: its graceful stop may need our coordinator
        if code == 0 and election.refused.is_set():
            code = EXIT_USAGE  # as the coordinator of `kstream run` or its own process exits
        elif code == 0 and election.job_failed.is_set():
            code = 1
    sys.exit(code)


def cooperative_member(w: Worker) -> Callable[[], str] | None:
    """The member id this worker pulses with, when it pulses (cooperative assignment): the
    election then watches the coordinator's host (``kstream.protocol.takeover``)."""
    mode = w.mode
    if not isinstance(mode, Checkpointed) or mode.pulse is None:
        return None
    pulse = mode.pulse
    return lambda: pulse.member
