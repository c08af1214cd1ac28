"""Metric definitions, bounded labels from the real code paths, the endpoint, log formats."""

from __future__ import annotations

import json
import logging
import socket
import urllib.request
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from kstream.checkpointstorage.history import CheckpointStatus
from kstream.checkpointstorage.metadata import TaskSnapshot
from kstream.config import CheckpointingConfig, RestartStrategy
from kstream.elements.events import MIN_TS
from kstream.logs import JsonFormatter, TextFormatter, ctx, log_at_least
from kstream.metrics import Metrics, MetricsPortError, PortSpec, serve_metrics
from kstream.metrics.labels import (
    CHECKPOINT_REASONS,
    DEAD_LETTER_REASONS,
    RESTART_CAUSES,
    checkpoint_reason,
    dead_letter_reason,
    restart_cause,
)
from kstream.metrics.worker import WorkerMetrics
from kstream.progress import Progress
from kstream.protocol.coordinator import CheckpointCoordinator
from kstream.protocol.messages import (
    AcknowledgeCheckpoint,
    DeclineCheckpoint,
    Heartbeat,
    JobFailed,
    Message,
    Restore,
    Resume,
    TaskFailed,
    TaskReady,
    TriggerCheckpoint,
)
from kstream.protocol.recovery import recover
from kstream.runtime.graph import Reader
from kstream.serde import serde_by_name

ALLOWED_LABELS = {"task", "topic", "partition", "operator", "reason", "cause", "source"}


def test_every_metric_follows_prometheus_conventions() -> None:
    m = Metrics(CollectorRegistry())
    with m.coordinating():
        families = [f for f in m.registry.collect() if f.name != "kstream"]  # the Info metric
    assert len(families) >= 25
    for fam in families:
        assert fam.name.startswith("kstream_"), fam.name
        if fam.type == "counter":
            assert not fam.name.endswith("_total")  # the client appends _total to samples
        if fam.type == "histogram":
            assert fam.name.endswith(("_seconds", "_bytes")), fam.name
        assert "key" not in fam.name
    # Labels: only bounded dimensions (plan names, fixed reason sets), never a key.
    for attr in vars(m).values():
        names = getattr(attr, "_labelnames", ())
        assert set(names) <= ALLOWED_LABELS, names
    m.records_in.labels("s0-0", "in").inc(3)
    m.checkpoints_failed.labels("timeout").inc()
    with m.coordinating():
        text = _exposition(m.registry)
    assert 'kstream_records_in_total{task="s0-0",topic="in"} 3.0' in text
    assert 'kstream_checkpoints_failed_total{reason="timeout"} 1.0' in text
    assert "kstream_checkpoint_duration_seconds_bucket" in text


def _exposition(registry: CollectorRegistry) -> str:
    return generate_latest(registry).decode()


def test_metrics_port_spec() -> None:
    assert PortSpec.parse("0").off
    assert PortSpec.parse(9250) == PortSpec(9250, 9250)
    assert PortSpec.parse("9250-9259") == PortSpec(9250, 9259)
    for bad in ("x", "9259-9250", "70000", "0-10", "-1"):
        with pytest.raises(MetricsPortError):
            PortSpec.parse(bad)
    assert serve_metrics("0", "127.0.0.1", CollectorRegistry()) is None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_endpoint_serves_the_registry_and_skips_a_busy_port_of_a_range() -> None:
    m = Metrics(CollectorRegistry())
    m.checkpoints_completed.inc(2)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        low = busy.getsockname()[1]
        # The busy port is skipped; the next free one of the range is taken.
        port = None
        for high in range(low + 1, low + 20):
            try:
                port = serve_metrics(f"{low}-{high}", "127.0.0.1", m.registry)
                break
            except OSError:
                continue
        assert port is not None and low < port
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert "kstream_checkpoints_completed_total" not in body  # not coordinating here
    with m.coordinating():
        hosting = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    assert "kstream_checkpoints_completed_total 2.0" in hosting.decode()


def test_only_the_process_hosting_the_coordinator_exports_the_jobs_families() -> None:
    """Of N workers electing their coordinator one speaks for the job: the others export
    no kstream_last_completed_checkpoint_timestamp_seconds 0 to alert on, and kstream_info
    says which process it is."""
    m = Metrics(CollectorRegistry())
    m.identify("app", "worker", "1.0")
    m.job_attempt.set(4)
    m.last_checkpoint_time.set(1_700_000_000)

    def sample(name: str) -> float | None:
        return m.registry.get_sample_value(name)

    def role() -> str | None:
        for fam in m.registry.collect():
            if fam.name == "kstream":
                return str(fam.samples[0].labels["role"])
        return None

    assert sample("kstream_job_attempt") is None
    assert sample("kstream_last_completed_checkpoint_timestamp_seconds") is None
    assert sample("kstream_tasks_running") == 0  # the worker's own families stay
    assert role() == "worker"
    with m.coordinating():
        assert sample("kstream_job_attempt") == 4
        assert sample("kstream_last_completed_checkpoint_timestamp_seconds") == 1_700_000_000
        assert role() == "worker+coordinator"
    assert sample("kstream_job_attempt") is None
    assert role() == "worker"
    m.identify("app", "coordinator", "1.0")
    with m.coordinating():
        assert role() == "coordinator"


# ---- bounded labels, from the messages the real code writes -----------------------------


def _coordinator(history: list[Message] | None = None, **cfg: Any) -> CheckpointCoordinator:
    rec = recover(history if history is not None else [Resume(0, {})], [], None)
    return CheckpointCoordinator(
        frozenset({"a", "b"}),
        CheckpointingConfig(**{"interval": 1.0, "timeout": 5.0, **cfg}),
        RestartStrategy(max_restarts=5, window=100.0, delay=0.0, restore_timeout=4.0),
        recovered=rec,
    )


def _ack(n: int, task: str, attempt: int = 0) -> AcknowledgeCheckpoint:
    return AcknowledgeCheckpoint(n, task, attempt, TaskSnapshot(f"h/{task}/{n}"))


def test_checkpoint_reasons_of_every_abort_path() -> None:
    c = _coordinator(max_concurrent=2, tolerable_failures=10)
    c.start(0.0)
    c.tick(1.0)  # 1
    c.tick(2.0)  # 2
    c.handle(DeclineCheckpoint(1, "a", 0, "upload failed: timed out after 3s"), 2.1)
    c.handle(_ack(2, "a"), 2.2)
    c.tick(3.0)  # 3
    c.tick(8.0)  # 2 and 3 time out
    c.tick(9.0)  # 4
    c.tick(10.0)  # 5
    for t in ("a", "b"):
        c.handle(_ack(5, t), 10.5)
    (meta,) = [m for m in c._completing.values()]
    c.metadata_written(meta.checkpoint_id, 10.6)  # 5 completes: 4 is subsumed
    c.tick(11.0)  # 6
    c.tick(11.5)
    c.handle(_ack(6, "a"), 11.6)
    c.handle(_ack(6, "b"), 11.7)
    c.metadata_failed(6, "disk full", 11.8)
    c.tick(12.0)  # 7
    c.handle(TaskFailed("a", "w1", 0, "ValueError"), 12.1)  # 7 cancelled by the failover
    ended = [(e.checkpoint_id, e.status, checkpoint_reason(e.reason)) for e in c.take_ended()]
    assert ended == [
        (1, CheckpointStatus.FAILED, "declined"),
        (2, CheckpointStatus.FAILED, "timeout"),
        (3, CheckpointStatus.FAILED, "timeout"),
        (4, CheckpointStatus.ABORTED, "subsumed"),
        (6, CheckpointStatus.FAILED, "metadata_write_failed"),
        (7, CheckpointStatus.ABORTED, "failover"),
    ]
    assert c.take_ended() == []
    restarted = _coordinator(history=[Resume(0, {}), TriggerCheckpoint(3, 0, 500)])
    restarted.start(0.0)
    assert [checkpoint_reason(e.reason) for e in restarted.take_ended()] == [
        "coordinator_restarted"
    ]
    failing = _coordinator(tolerable_failures=0, max_concurrent=2)
    failing.start(0.0)
    failing.tick(1.0)
    failing.tick(2.0)
    failing.handle(DeclineCheckpoint(1, "a", 0, "no"), 2.5)  # fails the job; 2 is cancelled
    assert [(e.status, checkpoint_reason(e.reason)) for e in failing.take_ended()] == [
        (CheckpointStatus.FAILED, "declined"),
        (CheckpointStatus.ABORTED, "job_failed"),
    ]
    assert set(CHECKPOINT_REASONS) >= {"declined", "job_failed", "other"}


def _restore_reason(c: CheckpointCoordinator, now: float) -> str:
    cmds = c.tick(now)
    assert any(getattr(cmd, "message", None).__class__ is Restore for cmd in cmds)
    return restart_cause(c.failover.failure_reason)


def test_restart_causes_of_every_failover_path() -> None:
    fresh = _coordinator(history=[])
    fresh.start(0.0)
    assert _restore_reason(fresh, 0.0) == "start"

    def running() -> CheckpointCoordinator:
        c = _coordinator(history=[Resume(1, {"a": "w1", "b": "w2"})])
        c.start(0.0)
        c.handle(Heartbeat("w1", ("a",), 3), 0.1)
        c.handle(Heartbeat("w2", ("b",), 3), 0.1)
        return c

    c = running()
    c.handle(TaskFailed("a", "w1", 1, "ValueError"), 1.0)
    assert _restore_reason(c, 1.0) == "task_failed"
    c = running()
    c.handle(Heartbeat("w2", ("b",), 3), 10.5)
    assert _restore_reason(c, 10.6) == "worker_lost"  # w1 silent for 10.5 s
    c = running()
    c.handle(Heartbeat("w1", ("a",), 4), 1.0)
    assert _restore_reason(c, 1.0) == "rebalance"
    c = running()
    c.handle(Heartbeat("w1", (), 3), 1.0)
    assert _restore_reason(c, 1.0) == "rebalance"  # a worker rejoined without its tasks
    c = running()
    c.handle(Heartbeat("w1", ("a", "b"), 3), 1.0)
    assert _restore_reason(c, 1.0) == "rebalance"
    c = running()
    c.handle(TaskFailed("a", "w1", 1, "x"), 1.0)
    c.tick(1.0)  # attempt 2 restoring
    c.handle(TaskReady(2, "a", "w1", 3), 1.1)
    c.tick(5.5)  # restore timeout: b never ready
    assert _restore_reason(c, 5.6) == "restore_timeout"
    c = _coordinator(history=[Restore(3, None)])
    c.start(0.0)
    assert _restore_reason(c, 0.0) == "coordinator_restarted"
    c = _coordinator(history=[Resume(1, {}), JobFailed("boom")])
    c.start(0.0)
    assert _restore_reason(c, 0.0) == "coordinator_restarted"
    assert len(RESTART_CAUSES) == len(set(RESTART_CAUSES))


def test_dead_letter_reasons_from_the_task_reader() -> None:
    def reasons(extractor: Any, raw: list[tuple[Any, Any, int]]) -> list[str]:
        reader = Reader(None, serde_by_name("str"), serde_by_name("json"), extractor)
        return [dead_letter_reason(r) for _i, r in reader.decode(raw)[3]]

    assert reasons(None, [(b"k", b"{bad", 1), (b"\xff", b"1", 1)]) == ["deserialize"] * 2
    assert reasons(lambda v, ts: v["t"], [(b"k", b"1", 1)]) == ["timestamp"]
    assert dead_letter_reason("malformed internal record: no ks.task header") == "internal_record"
    assert dead_letter_reason("") == "other"
    assert dead_letter_reason("operator 'map1' raised ValueError: x") == "operator"
    assert set(DEAD_LETTER_REASONS) == {
        "deserialize",
        "timestamp",
        "internal_record",
        "operator",
        "other",
    }


# ---- log formats -----------------------------------------------------------------------


def _record(msg: str, **extra: Any) -> logging.LogRecord:
    rec = logging.LogRecord("kstream.worker", logging.INFO, __file__, 1, msg, (), None)
    for k, v in extra.items():
        setattr(rec, k, v)
    return rec


def test_json_log_lines_carry_app_attempt_and_task() -> None:
    line = JsonFormatter().format(_record("task restored", app="wc", **ctx(attempt=3, task="s1-0")))
    body = json.loads(line)
    assert body["message"] == "task restored"
    assert (body["app"], body["attempt"], body["task"]) == ("wc", 3, "s1-0")
    assert body["level"] == "INFO" and body["logger"] == "kstream.worker"
    assert body["time"].endswith("+00:00")
    text = TextFormatter().format(_record("task restored", app="wc", **ctx(attempt=3)))
    assert text.endswith("kstream.worker: task restored [app=wc attempt=3]")


# ---- the worker's side ------------------------------------------------------------------


class _FakeTask:
    def __init__(self, watermark: int) -> None:
        self.watermark = watermark
        self.late: dict[str, tuple[int, int]] = {}
        self.metrics: dict[str, int] = {}

    def late_counts(self) -> dict[str, tuple[int, int]]:
        return dict(self.late)


def test_worker_metrics_count_per_batch_and_sync_late_records_as_deltas() -> None:
    reg = CollectorRegistry()
    wm = WorkerMetrics(Metrics(reg), wall=lambda: 1000.0)
    wm.records_in("s0-0", "in", 500)
    wm.records_in("s0-0", "in", 20)
    wm.records_out("s0-0", "out", 7)
    wm.dead_letter("in", "invalid JSON: Expecting value")
    task, fresh = _FakeTask(990_000), _FakeTask(MIN_TS)
    task.late = {"window3": (2, 0)}
    wm.sync({"s0-0": task, "s0-1": fresh}, {("in", 0): 12})
    task.late = {"window3": (5, 1)}
    task.metrics = {"duplicates_dropped": 2}
    wm.sync({"s0-0": task, "s0-1": fresh}, {("in", 0): 3})
    # The task is restored: its last count is taken, the new incarnation counts from 0.
    task.late = {"window3": (6, 1)}
    task.metrics = {"duplicates_dropped": 3}
    wm.task_closed("s0-0", task)
    again = _FakeTask(995_000)
    again.late = {"window3": (1, 0)}
    again.metrics = {"duplicates_dropped": 1}
    wm.sync({"s0-0": again}, {})

    def value(name: str, **labels: str) -> float | None:
        return reg.get_sample_value(name, labels)

    assert value("kstream_records_in_total", task="s0-0", topic="in") == 520
    assert value("kstream_records_out_total", task="s0-0", topic="out") == 7
    assert value("kstream_dead_letters_total", topic="in", reason="deserialize") == 1
    assert value("kstream_late_records_dropped_total", task="s0-0", operator="window3") == 7
    assert value("kstream_late_records_side_output_total", task="s0-0", operator="window3") == 1
    assert value("kstream_internal_duplicates_dropped_total", task="s0-0") == 4
    assert value("kstream_internal_duplicates_dropped_total", task="s0-1") is None
    assert value("kstream_event_time_lag_seconds", task="s0-0") == 5.0
    assert value("kstream_event_time_lag_seconds", task="s0-1") is None  # no watermark yet
    assert value("kstream_consumer_lag_records", topic="in", partition="0") is None  # unassigned
    assert value("kstream_tasks_running") == 1


def test_progress_lines_for_long_work_only() -> None:
    now = [0.0]
    lines: list[str] = []
    p = Progress(
        "restore of task s0-0 from chk-3",
        total_items=4,
        total_bytes=4 * 1024 * 1024,
        emit=lines.append,
        clock=lambda: now[0],
    )
    now[0] = 1.0
    p.advance(1, 1024 * 1024)  # within the first period: silent
    now[0] = 2.0
    p.advance(1, 1024 * 1024)
    now[0] = 3.0
    p.advance(2, 2 * 1024 * 1024)
    p.finish()
    assert lines == [
        "restore of task s0-0 from chk-3: 2/4 files, 2.0 MiB of 4.0 MiB (50%), 1.0 MiB/s, ETA 2s",
        "restore of task s0-0 from chk-3: 4/4 files, 4.0 MiB of 4.0 MiB (100%), 1.3 MiB/s, "
        "done in 3.0s",
    ]
    quick: list[str] = []
    q = Progress("x", emit=quick.append, clock=lambda: 0.0)
    q.advance(10)
    q.finish()
    assert quick == []


def test_job_processes_log_at_info_at_least() -> None:
    root = logging.getLogger()
    before = root.level
    try:
        root.setLevel(logging.WARNING)
        log_at_least(logging.INFO)
        assert root.level == logging.INFO
        root.setLevel(logging.DEBUG)  # -vv keeps debug
        log_at_least(logging.INFO)
        assert root.level == logging.DEBUG
    finally:
        root.setLevel(before)
