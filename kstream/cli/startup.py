"""The start-up sequence `kstream run`, `kstream worker` and `kstream coordinator` share.

Every refusal is one line ``kstream: <reason>`` on stderr and an exit code (STYLE:
1 something outside failed — Kafka, the store; 2 usage or configuration, or a state
that does not fit the topology), before anything is started or written.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click

from kstream.cli.options import build_job_config
from kstream.config import ConfigError, JobConfig
from kstream.hosting.coordinator import EXIT_FAILED, EXIT_USAGE
from kstream.hosting.startup import Coordination, StartRefused, check_start
from kstream.job import Job, ensure_job_topics, load_topology, plan_live
from kstream.kafka.clients import KafkaRefused, KafkaUnreachable, check_cluster
from kstream.kafka.control import ControlError
from kstream.kafka.reachability import BrokerOutage, Reachability

__all__ = ["prepare_job", "prepare_tasks", "refuse", "start_worker"]

_W = TypeVar("_W")


def refuse(reason: object, code: int) -> NoReturn:
    """Print ``kstream: reason`` and exit ``code``."""
    click.echo(f"kstream: {reason}", err=True)
    sys.exit(code)


def prepare_job(
    topology: str,
    bootstrap: str | None,
    opts: dict[str, Any],
    *,
    bounded: bool = False,
    default_bootstrap: Callable[[], str | None] | None = None,
) -> Job:
    """1. Load TOPOLOGY and the job's configuration; 2. reach the cluster; 3. plan against
    the live topics; 4. check the store and the state the job starts from
    (:func:`kstream.hosting.startup.check_start`); 5. create the job's topics."""
    try:
        topo = load_topology(topology)
        cfg = build_job_config(
            opts,
            bootstrap=bootstrap,
            default_app_id=topo.name,
            bounded=bounded,
            **({"default_bootstrap": default_bootstrap} if default_bootstrap else {}),
        )
        _connect(cfg)
        job = plan_live(topo, cfg)
        check_start(cfg, Coordination.of(job.plan).description)
        ensure_job_topics(job)
    except ConfigError as e:
        refuse(e, EXIT_USAGE)
    except StartRefused as e:
        refuse(e, e.code)
    return job


def prepare_tasks(bootstrap: str | None, opts: dict[str, Any], tasks: str) -> JobConfig:
    """`kstream coordinator --tasks`: the configuration, the cluster and the store checked
    (no topology: no plan to check the state against)."""
    try:
        if opts["app_id"] is None:
            raise ConfigError("--tasks needs --app-id")
        cfg = build_job_config(opts, bootstrap=bootstrap, default_app_id=opts["app_id"])
        if not {t.strip() for t in tasks.split(",")} - {""}:
            raise ConfigError(f"--tasks {tasks!r} names no task")
        _connect(cfg)
        check_start(cfg, None)
    except ConfigError as e:
        refuse(e, EXIT_USAGE)
    except StartRefused as e:
        refuse(e, e.code)
    return cfg


def _connect(cfg: JobConfig, timeout: float = 10.0) -> None:
    """Return once the job's cluster answers a metadata request.

    No answer within ``timeout`` seconds is an outage, waited out like one while the job
    runs (kstream.kafka.reachability): one log line when it starts and one when it ends,
    and exit 1 with one line once it outlasts --max-outage. Credentials the cluster
    refuses: exit 1 with one line at once.
    """
    reach = Reachability(cfg.max_outage)
    while True:
        wait = timeout
        if reach.down:  # no longer than needed to see the bound passed
            wait = max(1.0, min(timeout, round(reach.max_outage - reach.down_for()) + 1.0))
        try:
            check_cluster(cfg.bootstrap_servers, cfg.kafka, wait)
        except KafkaRefused as e:
            refuse(e, EXIT_FAILED)
        except KafkaUnreachable as e:
            reach.failed(str(e))
            try:
                reach.check()
            except BrokerOutage as outage:
                refuse(outage, EXIT_FAILED)
            continue
        reach.ok()
        return


def start_worker(make: Callable[[], _W]) -> _W:
    """``make()`` — a worker opening its clients; exit 1 with one line when that fails for
    a reason outside (the brokers unreachable past --max-outage while the worker reads
    the control topic's position)."""
    try:
        return make()
    except (ControlError, KafkaUnreachable) as e:
        refuse(e, EXIT_FAILED)
