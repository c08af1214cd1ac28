"""A deployed job: its topology file loaded, planned against the live topics, topics ensured.

Shared by ``kstream worker``, ``kstream coordinator`` and ``kstream run`` so they
all see the same plan (docs/design.md §2: the plan is fixed for a deployment).
"""

from __future__ import annotations

import runpy
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from kstream.api.spec import TopicInput
from kstream.api.topology import Topology
from kstream.config import ConfigError, JobConfig
from kstream.kafka.clients import (
    TopicSpec,
    ensure_topics,
    make_admin,
    max_message_bytes,
    partition_counts,
)
from kstream.kafka.commits import commits_topic_spec
from kstream.kafka.controltopic import control_topic_spec
from kstream.kafka.dlq import dlq_topic_spec
from kstream.plan import JobPlan, PlanError, plan_job
from kstream.serde.registry import use_settings as use_registry_settings


def load_topology(path: str | Path) -> Topology:
    """The module variable ``topology`` of the Python file at ``path``; ConfigError (one
    line: the exception, the file and line) if the file does not run or defines none."""
    try:
        module = runpy.run_path(str(path))
    except SyntaxError as e:
        raise ConfigError(
            f"{path} is not valid Python: {e.msg} ({e.filename}, line {e.lineno})"
        ) from e
    except Exception as e:  # the user's file ran and raised: say what and where
        raise ConfigError(f"{path} raised {_where(e, path)}") from e
    topology = module.get("topology")
    if not isinstance(topology, Topology):
        raise ConfigError(
            f"{path} must define a module variable 'topology' (a kstream.api.Topology); "
            f"found {type(topology).__name__}"
        )
    return topology


def _where(e: BaseException, path: str | Path) -> str:
    """``Name: message (file, line N)``: ``e`` and the deepest frame of it in ``path``
    (else its deepest frame: a module the topology imports)."""
    frames = traceback.extract_tb(e.__traceback__)
    ours = [f for f in frames if Path(f.filename).resolve() == Path(path).resolve()]
    deepest = ours or frames
    where = f" ({deepest[-1].filename}, line {deepest[-1].lineno})" if deepest else ""
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}{': ' + first if first else ''}{where}"


def source_topics(topology: Topology) -> set[str]:
    """User topics the topology reads (streams and tables)."""
    return {n.spec.topic for n in topology.nodes if isinstance(n.spec, TopicInput)}


INTERNAL_TOPIC_CONFIG = {"retention.ms": "-1", "cleanup.policy": "delete"}


@dataclass(frozen=True)
class Job:
    """A job config with its plan."""

    config: JobConfig
    plan: JobPlan


def plan_live(topology: Topology, config: JobConfig, *, wait_s: float = 0.0) -> Job:
    """Plan ``topology`` over the partition counts of its source topics as they exist now.

    ``config.checkpointing.guarantee`` applies to sinks that declare none (None: the
    topology's default).

    A missing source topic is a configuration error naming it (create it first), unless
    ``wait_s`` > 0, in which case it is waited for.
    """
    use_registry_settings(config.kafka.registry)  # the Schema Registry serdes' defaults
    admin = make_admin(config.bootstrap_servers, config.kafka)
    wanted = source_topics(topology)
    deadline = time.monotonic() + wait_s
    while True:
        counts = partition_counts(admin, wanted)
        missing = sorted(wanted - counts.keys())
        if not missing:
            break
        if time.monotonic() >= deadline:
            raise ConfigError(
                f"source topic(s) {', '.join(missing)} do not exist on {config.bootstrap_servers}; "
                "create them first (e.g. `kstream dev topics create NAME --partitions N`)"
            )
        time.sleep(0.5)
    try:
        plan = plan_job(
            topology, config.app_id, counts, default_guarantee=config.checkpointing.guarantee
        )
    except PlanError as e:
        raise ConfigError(str(e)) from e
    return Job(config, plan)


def ensure_job_topics(job: Job) -> None:
    """Create the internal, sink, control, commit-marker and dead-letter topics if missing,
    replicated as the job says (by default: as the cluster's defaults say).

    An existing topic that conflicts with the plan (an internal topic's partition
    count, the control topic's single partition, a cleanup policy) is a ConfigError
    naming the topic and the conflict, not a surprise at run time.
    """
    cfg, plan = job.config, job.plan
    admin = make_admin(cfg.bootstrap_servers, cfg.kafka)
    internal = {t.name: t.partitions for t in plan.internal_topics}
    stage_parts = {s.name: s.partitions for s in plan.stages}
    sinks = {s.topic: stage_parts[s.stage] for s in plan.sinks}
    compacted = {s.topic for s in plan.sinks if s.compacted}
    # Internal records keep their event-time timestamps; time-based retention would
    # delete old-event-time records before they are read (or re-read after a
    # restore), so internal topics are never expired by time (as Kafka Streams does).
    # Their partition count is the plan's, and compaction would drop records.
    specs = [
        TopicSpec(name, n, config=INTERNAL_TOPIC_CONFIG, exact_partitions=True)
        for name, n in internal.items()
    ]
    specs += [
        TopicSpec(name, n, {"cleanup.policy": "compact"} if name in compacted else None)
        for name, n in sinks.items()
        if name not in internal
    ]
    # Any record a source can hold must fit in the dead-letter topic (issue 13).
    source_max = max_message_bytes(admin, plan.source_topics)
    specs += [
        control_topic_spec(cfg.app_id),
        commits_topic_spec(cfg.app_id),
        dlq_topic_spec(cfg.app_id, source_max_message_bytes=source_max),
    ]
    ensure_topics(admin, specs, replication=cfg.replication)
