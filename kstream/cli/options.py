"""Options shared by the commands that run a job (worker, coordinator, run), mapped onto JobConfig."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

import click

from kstream import __version__
from kstream.checkpointstorage.objectstore import parse_store_options
from kstream.cli.clientsettings import collect_settings, kafka_options
from kstream.cli.common import (
    NO_BOOTSTRAP,
    app_id_option,
    local_bootstrap,
    store_option,
    store_options_option,
)
from kstream.config import (
    CheckpointingConfig,
    ConfigError,
    Guarantee,
    JobConfig,
    OnBadRecord,
    Replication,
    RestartStrategy,
    StartFrom,
    parse_instant,
)
from kstream.logs import log_at_least, set_app
from kstream.metrics import METRICS, MetricsPortError, serve_metrics


class ByteSize(click.ParamType):
    """A size in bytes: ``65536``, ``512KiB``, ``64MiB``, ``1GiB`` (> 0)."""

    name = "size"
    _UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip()
        digits = text.rstrip("bBkKmMgGiI")
        unit = self._UNITS.get(text[len(digits) :].lower())
        if not digits.isdigit() or unit is None or int(digits) <= 0:
            self.fail(f"{value!r} is not a size like 65536, 512KiB, 64MiB or 1GiB", param, ctx)
        return int(digits) * unit


F = Callable[..., Any]

_OPTIONS: list[Callable[[F], F]] = [
    app_id_option("The job's app id [default: the topology's name]."),
    store_option,
    store_options_option,
    click.option(
        "--state-dir",
        envvar="KSTREAM_STATE_DIR",
        default="./.kstream/state",
        show_default=True,
        help="Local directory for task state (RocksDB).",
    ),
    click.option(
        "--checkpointing/--no-checkpointing",
        default=True,
        show_default=True,
        help="Checkpointed (exactly-once capable) or not (committed offsets, no state restore).",
    ),
    click.option(
        "--interval",
        type=float,
        default=5.0,
        show_default=True,
        help="Seconds between checkpoint triggers.",
    ),
    click.option(
        "--timeout",
        type=float,
        default=60.0,
        show_default=True,
        help="Seconds before an incomplete checkpoint is aborted.",
    ),
    click.option(
        "--min-pause",
        type=float,
        default=0.0,
        show_default=True,
        help="Minimum seconds between the end of one checkpoint and the next trigger.",
    ),
    click.option(
        "--max-concurrent",
        type=int,
        default=1,
        show_default=True,
        help="Maximum checkpoints in flight.",
    ),
    click.option(
        "--tolerable-failures",
        type=int,
        default=3,
        show_default=True,
        help="Successive failed checkpoints tolerated before the job fails.",
    ),
    click.option(
        "--guarantee",
        type=click.Choice([g.value for g in Guarantee]),
        default=None,
        help="Sink guarantee for sinks that do not declare one [default: the topology's].",
    ),
    click.option(
        "--retained",
        type=int,
        default=3,
        show_default=True,
        help="Completed checkpoints kept in the store.",
    ),
    click.option(
        "--max-restarts",
        type=int,
        default=None,
        help="Fixed-count restart strategy: at most N failovers within --restart-window, "
        "then the job fails. Without it: exponential delay (restarts for ever, --restart-delay "
        "doubling up to --restart-max-delay, reset after 10 quiet minutes).",
    ),
    click.option(
        "--restart-max-delay",
        type=float,
        default=60.0,
        show_default=True,
        help="Exponential delay: the longest wait between two restarts.",
    ),
    click.option(
        "--restart-window",
        type=float,
        default=600.0,
        show_default=True,
        help="Seconds over which restarts are counted.",
    ),
    click.option(
        "--restart-delay",
        type=float,
        default=1.0,
        show_default=True,
        help="Fixed count: least seconds between two restores; exponential delay: the first "
        "wait (the first failure after a quiet spell restores at once).",
    ),
    click.option(
        "--restore-timeout",
        type=float,
        default=120.0,
        show_default=True,
        help="Seconds a restore may go without progress (no worker restored another "
        "task) before it starts over.",
    ),
    click.option(
        "--on-bad-record",
        type=click.Choice([m.value for m in OnBadRecord]),
        default=OnBadRecord.DEAD_LETTER.value,
        show_default=True,
        help="Undecodable input: send to <app>.dlq with the reason, or stop the job.",
    ),
    click.option(
        "--from-checkpoint",
        default=None,
        metavar="[APP:]ID",
        help="Start the job from completed checkpoint ID (of app APP: blue/green) instead of "
        "its own latest; applied once, at the job's first start with it.",
    ),
    click.option(
        "--from-savepoint",
        default=None,
        metavar="PATH",
        help="Start the job from the savepoint at PATH in the store (as printed by `kstream "
        "savepoint`, e.g. APP/savepoints/NAME); applied once.",
    ),
    click.option(
        "--new-partitions-from",
        default=None,
        metavar="TIME",
        help="When the state is rescaled to a source topic that gained partitions: read the "
        "new partitions from the first record at or after TIME (epoch ms or ISO 8601, "
        "UTC by default; the records' Kafka timestamps) instead of from the beginning.",
    ),
    click.option(
        "--allow-non-restored-state",
        is_flag=True,
        help="Restore even if the state has operators this topology no longer has (their state "
        "is dropped).",
    ),
    click.option(
        "--replication-factor",
        type=int,
        default=-1,
        show_default=True,
        help="Replication factor of the topics kstream creates (-1: the cluster's "
        "default.replication.factor).",
    ),
    click.option(
        "--min-insync-replicas",
        type=int,
        default=None,
        help="min.insync.replicas of the topics kstream creates [default: the cluster's].",
    ),
    click.option(
        "--max-outage",
        type=float,
        default=300.0,
        show_default=True,
        metavar="SECONDS",
        help="How long the brokers may stay unreachable before the job fails; shorter "
        "outages are retried with backoff and the job resumes by itself.",
    ),
    click.option(
        "--sink-buffer-memory",
        type=ByteSize(),
        default="64MiB",
        show_default=True,
        metavar="SIZE",
        help="Output the exactly-once sink tasks of a worker process keep in memory "
        "together until their checkpoints complete (bytes, or with KiB/MiB/GiB); past it "
        "the output is spilled to local disk in the tasks' state directories.",
    ),
    click.option(
        "--state-memory",
        type=ByteSize(),
        default="256MiB",
        show_default=True,
        metavar="SIZE",
        help="RocksDB block cache and memtables of all the tasks of a worker process "
        "together (bytes, or with KiB/MiB/GiB); up to half of it memtables.",
    ),
    kafka_options,
]

JOB_KEYS = (
    "app_id",
    "store_url",
    "store_options",
    "state_dir",
    "checkpointing",
    "interval",
    "timeout",
    "min_pause",
    "max_concurrent",
    "tolerable_failures",
    "guarantee",
    "retained",
    "max_restarts",
    "restart_window",
    "restart_delay",
    "restart_max_delay",
    "restore_timeout",
    "on_bad_record",
    "from_checkpoint",
    "from_savepoint",
    "allow_non_restored_state",
    "new_partitions_from",
    "replication_factor",
    "min_insync_replicas",
    "max_outage",
    "sink_buffer_memory",
    "state_memory",
    "kafka_settings",
    "kafka_config",
)


def job_options(f: F) -> F:
    """Decorate a click command with every job option (see ``build_job_config``)."""
    for opt in reversed(_OPTIONS):
        f = opt(f)
    return f


def pop_job_options(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Remove the job options from a command's kwargs and return them."""
    return {k: kwargs.pop(k) for k in JOB_KEYS}


def build_job_config(
    opts: dict[str, Any],
    *,
    bootstrap: str | None,
    default_app_id: str,
    bounded: bool = False,
    default_bootstrap: Callable[[], str | None] = local_bootstrap,
) -> JobConfig:
    """JobConfig from the job options (ConfigError on invalid values).

    The bootstrap is ``bootstrap`` (``--bootstrap``/``KSTREAM_BOOTSTRAP``), else the
    ``bootstrap.servers`` of ``--kafka-config``, else ``default_bootstrap()`` (the
    running local dev broker; `kstream run` starts it).
    """
    settings, file_bootstrap = collect_settings(opts["kafka_settings"], opts["kafka_config"])
    bootstrap = bootstrap or file_bootstrap or default_bootstrap()
    if not bootstrap:
        raise ConfigError(NO_BOOTSTRAP + " (or bootstrap.servers in --kafka-config)")
    return JobConfig(
        app_id=opts["app_id"] or default_app_id,
        bootstrap_servers=bootstrap,
        kafka=settings,
        replication=Replication(opts["replication_factor"], opts["min_insync_replicas"]),
        max_outage=opts["max_outage"],
        sink_buffer_memory=opts["sink_buffer_memory"],
        state_memory=opts["state_memory"],
        store_url=opts["store_url"],
        store_options=_store_options(opts.get("store_options") or ()),
        state_dir=opts["state_dir"],
        bounded=bounded,
        on_bad_record=OnBadRecord(opts["on_bad_record"]),
        start=StartFrom(
            opts["from_checkpoint"],
            opts["from_savepoint"],
            opts["allow_non_restored_state"],
            None
            if opts["new_partitions_from"] is None
            else parse_instant(opts["new_partitions_from"]),
        ),
        checkpointing=CheckpointingConfig(
            enabled=opts["checkpointing"] and not bounded,
            interval=opts["interval"],
            timeout=opts["timeout"],
            min_pause=opts["min_pause"],
            max_concurrent=opts["max_concurrent"],
            tolerable_failures=opts["tolerable_failures"],
            guarantee=Guarantee(opts["guarantee"]) if opts["guarantee"] else None,
            retained=opts["retained"],
        ),
        restart=RestartStrategy(
            max_restarts=opts["max_restarts"],
            window=opts["restart_window"],
            delay=opts["restart_delay"],
            max_delay=max(opts["restart_max_delay"], opts["restart_delay"]),
            restore_timeout=opts["restore_timeout"],
        ),
    )


def run_options(f: F) -> F:
    """``--bounded`` and ``--stop-when-idle``: how a worker's run ends."""
    f = click.option(
        "--stop-when-idle",
        type=float,
        default=None,
        metavar="SECONDS",
        help="Exit 0 once no input arrived for SECONDS and a checkpoint taken after the last "
        "input completed (all output committed); that checkpoint is requested at once.",
    )(f)
    return click.option(
        "--bounded",
        is_flag=True,
        help="Batch run: read every source up to its end offsets at start, store the final "
        "state, exit 0.",
    )(f)


def metrics_options(f: F) -> F:
    """``--metrics-port`` and ``--metrics-host``: where this process serves ``/metrics``."""
    f = click.option(
        "--metrics-host",
        envvar="KSTREAM_METRICS_HOST",
        default="0.0.0.0",
        show_default=True,
        help="Address the Prometheus endpoint listens on.",
    )(f)
    return click.option(
        "--metrics-port",
        envvar="KSTREAM_METRICS_PORT",
        default="0",
        show_default=True,
        metavar="PORT|LOW-HIGH|0",
        help="Serve Prometheus metrics at http://HOST:PORT/metrics; LOW-HIGH takes the first "
        "free port of the range (several processes on one host); 0: off.",
    )(f)


def start_observability(app_id: str, role: str, metrics_port: str, metrics_host: str) -> None:
    """Log at INFO at least, name the app in every log line, serve this process's metrics
    (exit 2 on a bad port)."""
    log_at_least(logging.INFO)
    set_app(app_id)
    METRICS.identify(app_id, role, __version__)
    try:
        port = serve_metrics(metrics_port, metrics_host)
    except (MetricsPortError, OSError) as e:
        click.echo(f"kstream: {e}", err=True)
        sys.exit(2)
    if port is not None:
        click.echo(f"metrics at http://{metrics_host}:{port}/metrics", err=True)


def _store_options(pairs: tuple[str, ...]) -> dict[str, str]:
    """``--store-option k=v`` pairs as a dict (ConfigError on a malformed pair)."""
    try:
        return parse_store_options(pairs)
    except ValueError as e:
        raise ConfigError(str(e)) from e
