"""Worker settings and the job wiring the crash tests depend on (no broker)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

import kstream.job as jobmod
from kstream.config import CheckpointingConfig, ConfigError, Guarantee, JobConfig, KafkaSettings
from kstream.elements.records import OutputBatch
from kstream.job import INTERNAL_TOPIC_CONFIG, Job, ensure_job_topics, plan_live
from kstream.kafka.clients import TopicSpec
from kstream.kafka.exactly_once_sink import ExactlyOnceSink
from kstream.metrics import Metrics
from kstream.metrics.worker import WorkerMetrics
from kstream.plan import plan_job
from kstream.sinkbuffer.buffer import EpochBuffer
from kstream.sinkbuffer.epochs import ColumnBatch
from kstream.worker.routing import Router, TaskRoute
from kstream.worker.runner import has_due_output
from kstream.worker.settings import PausePoint, WorkerSettings
from topologies.wordcount import topology as wordcount


def test_settings_validate_and_map_pause_points() -> None:
    assert WorkerSettings().session_timeout_s == 10.0 and WorkerSettings().pause_at is None
    assert PausePoint("after-snapshot") is PausePoint.AFTER_SNAPSHOT
    assert PausePoint("before-sink-commit") is PausePoint.BEFORE_SINK_COMMIT
    with pytest.raises(ConfigError, match="session timeout"):
        WorkerSettings(session_timeout_s=0)


def test_sink_commit_pause_only_when_the_completion_publishes_records() -> None:
    sink = ExactlyOnceSink.__new__(ExactlyOnceSink)  # buffer only: no producer needed
    sink.buffer = EpochBuffer()
    sink.buffer.seal(1)  # empty epoch 1
    assert not has_due_output(sink, 1)
    sink.buffer.append(("out", None, b"k", b"v", 0, None))
    sink.buffer.seal(2)
    assert not has_due_output(sink, 1)
    assert has_due_output(sink, 2) and has_due_output(sink, 3)
    sink.buffer.committed(sink.buffer.due(2), 2)
    assert not has_due_output(sink, 2) and not has_due_output(sink, 3)


def test_internal_topics_are_created_without_time_retention(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Internal records keep event-time timestamps: time-based retention would expire
    old-event-time records before they are read (found by the e2e crash tests)."""
    cfg = JobConfig(app_id="wc", bootstrap_servers="unused:9092")
    plan = plan_job(wordcount, "wc", {"lines": 3})
    created: list[TopicSpec] = []
    monkeypatch.setattr(jobmod, "make_admin", lambda *_a, **_k: object())

    def ensure(_admin: Any, specs: Iterable[TopicSpec], **_kw: Any) -> None:
        created.extend(specs)

    monkeypatch.setattr(jobmod, "ensure_topics", ensure)
    monkeypatch.setattr(jobmod, "max_message_bytes", lambda _admin, _topics: 2_000_000)
    ensure_job_topics(Job(cfg, plan))
    internal = {t.name for t in plan.internal_topics}
    assert internal == {"wc.stage0.repartition"}
    assert {s.name: s.config for s in created if s.name in internal} == {
        "wc.stage0.repartition": INTERNAL_TOPIC_CONFIG
    }
    assert INTERNAL_TOPIC_CONFIG == {"retention.ms": "-1", "cleanup.policy": "delete"}
    # The dead-letter topic takes any record of the sources, with its headers.
    assert {s.name: s.config for s in created if s.name == "wc.dlq"} == {
        "wc.dlq": {"max.message.bytes": str(2_000_000 + 64 * 1024)}
    }


def test_plan_live_applies_the_default_guarantee(monkeypatch: pytest.MonkeyPatch) -> None:
    """`kstream worker --guarantee at_least_once` reaches sinks that declare none (it
    was ignored before: found by the e2e crash tests)."""
    cfg = JobConfig(app_id="wc", bootstrap_servers="unused:9092")
    monkeypatch.setattr(jobmod, "make_admin", lambda *_a, **_k: object())
    monkeypatch.setattr(jobmod, "partition_counts", lambda _admin, _topics: {"lines": 3})
    alo_cfg = replace(cfg, checkpointing=CheckpointingConfig(guarantee=Guarantee.AT_LEAST_ONCE))
    alo = plan_live(wordcount, alo_cfg)
    assert [s.guarantee for s in alo.plan.sinks] == [Guarantee.AT_LEAST_ONCE]
    default = plan_live(wordcount, cfg)
    assert [s.guarantee for s in default.plan.sinks] == [Guarantee.EXACTLY_ONCE]


def test_route_hands_sink_batches_over_as_columns() -> None:
    """Routing gives a sink the task's lists, no tuple per record (the task never
    changes a drained batch)."""
    sink = ExactlyOnceSink.__new__(ExactlyOnceSink)  # buffer only: no producer needed
    sink.buffer = EpochBuffer()
    keys: list[bytes | None] = [b"k1", b"k2"]
    values: list[bytes | None] = [b"v1", None]
    stamps = [5, 6]
    route = TaskRoute(
        "stage0-0",
        1,
        sinks={Guarantee.EXACTLY_ONCE: sink},
        sink_topics={"out": Guarantee.EXACTLY_ONCE},
    )
    router = Router.__new__(Router)  # no producer, no dead-letter writer: not used here
    registry = CollectorRegistry()
    router.metrics = WorkerMetrics(Metrics(registry))
    router.route(route, [OutputBatch("out", False, None, keys, values, stamps)])
    # Counted once per batch, per task and topic.
    assert (
        registry.get_sample_value("kstream_records_out_total", {"task": "stage0-0", "topic": "out"})
        == 2
    )
    (chunk,) = sink.buffer.open.chunks
    assert isinstance(chunk, ColumnBatch)
    assert (chunk.topic, chunk.keys, chunk.values, chunk.timestamps) == (
        "out",
        keys,
        values,
        stamps,
    )
    assert chunk.keys is keys
    sink.buffer.seal(1)
    assert has_due_output(sink, 1)


def test_cooperative_assignment_is_for_a_job_without_a_shuffle_that_reads_one_topic() -> None:
    """-X partition.assignment.strategy: range or cooperative-sticky only, and a worker
    refuses cooperative-sticky before it opens any client when its tasks read partition p
    of more than one topic (the sticky assignor would split them: docs/design.md §6.8)."""
    from kstream.api import Topology
    from kstream.worker.loop import Worker

    coop = KafkaSettings({"partition.assignment.strategy": "cooperative-sticky"})
    assert JobConfig("j", "unused:9092", kafka=coop).cooperative
    assert not JobConfig("j", "unused:9092").cooperative
    with pytest.raises(ConfigError, match=r"partition\.assignment\.strategy"):
        KafkaSettings({"partition.assignment.strategy": "roundrobin"})
    cfg = JobConfig(app_id="wc", bootstrap_servers="unused:9092", kafka=coop)
    with pytest.raises(ConfigError, match="needs a job without a key_by that reads one topic"):
        Worker(Job(cfg, plan_job(wordcount, "wc", {"lines": 3})))
    both = Topology("two")
    both.source("a").to("out")
    both.source("b").to("out")
    with pytest.raises(ConfigError, match="reads a, b"):
        Worker(Job(replace(cfg, app_id="two"), plan_job(both, "two", {"a": 2, "b": 2})))
