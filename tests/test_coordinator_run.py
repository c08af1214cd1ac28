"""The coordinator loop and its command executor, with a fake control topic and fake clock."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner
from prometheus_client import CollectorRegistry

from kstream.checkpointstorage.base import StoreError
from kstream.checkpointstorage.file import FileStore
from kstream.checkpointstorage.history import list_failures
from kstream.checkpointstorage.layout import index_path, metadata_path
from kstream.checkpointstorage.metadata import TaskSnapshot, read_index
from kstream.cli import main
from kstream.config import CheckpointingConfig, JobConfig
from kstream.hosting.coordinator import run_coordinator
from kstream.kafka.control import CoordinatorFenced
from kstream.kafka.reachability import Reachability
from kstream.metrics import Metrics
from kstream.protocol.messages import (
    AcknowledgeCheckpoint,
    CheckpointAborted,
    CheckpointCompleted,
    Heartbeat,
    JobFailed,
    Message,
    Restore,
    Resume,
    TriggerCheckpoint,
)

Event = tuple[str, object]


class RecordingStore(FileStore):
    def __init__(self, root: Path, events: list[Event], fail_writes: bool = False) -> None:
        super().__init__(root)
        self.events = events
        self.fail_writes = fail_writes

    def put_bytes(self, path: str, data: bytes, *, exclusive: bool = False) -> None:
        if self.fail_writes:
            raise StoreError(f"{path}: no space left on device")
        super().put_bytes(path, data, exclusive=exclusive)
        self.events.append(("write", path))


class FakeTransport:
    """The control topic: records sends; ``workers`` answers each sent message."""

    def __init__(
        self,
        events: list[Event],
        workers: Callable[[Message], list[Message]],
        fence_after: int | None = None,
    ) -> None:
        self.now = 1000.0
        self.events = events
        self.workers = workers
        self.inbox: list[Message] = []
        self.fence_after = fence_after
        self.closed = False
        self.skipped = 0
        self.reach: Reachability | None = None

    def open(self, timeout: float = 30.0) -> list[Message]:
        return [Resume(0, {})]  # a job already running in attempt 0

    def poll(self, timeout: float) -> list[Message]:
        self.now += timeout
        out, self.inbox = self.inbox, []
        return out

    def send(self, messages: Sequence[Message], timeout: float = 30.0) -> None:
        if self.fence_after is not None and len(self.sent()) >= self.fence_after:
            raise CoordinatorFenced("another coordinator took over app 'app'")
        for m in messages:
            self.events.append(("send", m))
            self.inbox += self.workers(m)

    def close(self) -> None:
        self.closed = True

    def sent(self) -> list[Message]:
        return [m for kind, m in self.events if kind == "send"]  # type: ignore[misc]


def acking(*tasks: str) -> Callable[[Message], list[Message]]:
    def answer(m: Message) -> list[Message]:
        if isinstance(m, TriggerCheckpoint):
            return [
                AcknowledgeCheckpoint(
                    m.checkpoint_id, t, m.attempt, TaskSnapshot(f"app/m/{t}/{m.checkpoint_id}")
                )
                for t in tasks
            ]
        return []

    return answer


def job(**checkpointing: object) -> JobConfig:
    cfg = CheckpointingConfig(**{"interval": 1.0, "timeout": 3.0, **checkpointing})  # type: ignore[arg-type]
    return JobConfig("app", "unused:9092", checkpointing=cfg)


def run(
    tmp_path: Path,
    transport: FakeTransport,
    events: list[Event],
    until: int,
    fail_writes: bool = False,
    **cfg: object,
) -> int:
    return run_coordinator(
        job(**cfg),
        frozenset({"a", "b"}),
        transport=transport,
        store=RecordingStore(tmp_path, events, fail_writes),
        clock=lambda: transport.now,
        should_stop=lambda: len(transport.sent()) >= until,
        poll_timeout=0.25,
    )


def test_metadata_is_in_the_store_before_completion_is_announced(tmp_path: Path) -> None:
    events: list[Event] = []
    transport = FakeTransport(events, acking("a", "b"))
    assert run(tmp_path, transport, events, until=4) == 0
    # The index is a hint, written by the retention thread after the metadata: it is
    # never first, and it is off the announcement's path.
    index = ("write", index_path("app"))
    assert [e for e in events if e != index][:4] == [
        ("send", TriggerCheckpoint(1, 0, 1_001_000)),
        ("write", metadata_path("app", 1)),
        ("send", CheckpointCompleted(1, 0)),
        ("send", TriggerCheckpoint(2, 0, 1_002_000)),
    ]
    assert index in events
    assert events.index(index) > events.index(("write", metadata_path("app", 1)))
    completed = [m.checkpoint_id for k, m in events if isinstance(m, CheckpointCompleted)]
    assert completed and read_index(RecordingStore(tmp_path, []), "app") == completed
    assert transport.closed


def test_a_failed_metadata_write_is_an_abort_not_a_completion(tmp_path: Path) -> None:
    events: list[Event] = []
    transport = FakeTransport(events, acking("a", "b"))
    assert run(tmp_path, transport, events, until=2, fail_writes=True) == 0
    assert transport.sent()[1] == CheckpointAborted(
        1,
        "checkpoint 1: writing its metadata failed: "
        "app/checkpoints/chk-1.json: no space left on device",
    )
    assert not any(isinstance(m, CheckpointCompleted) for m in transport.sent())


def test_hard_failure_exits_1_after_telling_the_workers(tmp_path: Path) -> None:
    events: list[Event] = []
    transport = FakeTransport(events, acking("a"))
    assert run(tmp_path, transport, events, until=100, tolerable_failures=0) == 1
    assert transport.sent()[-1] == JobFailed(
        "checkpoint 1 timed out after 3s: no acknowledgement from tasks b. "
        "1 successive checkpoints failed; tolerable_failures=0 -> job failed"
    )


def test_a_fenced_coordinator_exits_1(tmp_path: Path) -> None:
    events: list[Event] = []
    transport = FakeTransport(events, acking("a", "b"), fence_after=3)
    assert run(tmp_path, transport, events, until=100) == 1
    assert len(transport.sent()) == 3 and transport.closed


def test_no_coordinator_is_needed_without_checkpointing(tmp_path: Path) -> None:
    events: list[Event] = []
    transport = FakeTransport(events, acking("a", "b"))
    assert run(tmp_path, transport, events, until=1, enabled=False) == 0
    assert events == []


def test_checkpoints_list_and_show(tmp_path: Path) -> None:
    events: list[Event] = []
    transport = FakeTransport(events, acking("a", "b"))
    run(tmp_path, transport, events, until=6)
    runner = CliRunner()
    out = runner.invoke(main, ["checkpoints", "list", "--store", str(tmp_path), "--app-id", "app"])
    assert out.exit_code == 0, out.output
    rows = [line.split() for line in out.output.splitlines()[1:]]
    assert [(r[0], r[1], r[3], r[4], r[5], r[7]) for r in rows] == [
        ("1", "completed", "0", "250ms", "0", "0"),
        ("2", "completed", "0", "250ms", "0", "0"),
        ("3", "completed", "0", "250ms", "0", "0"),
    ]
    out = runner.invoke(
        main, ["checkpoints", "show", "2", "--store", str(tmp_path), "--app-id", "app"]
    )
    assert out.exit_code == 0, out.output
    assert "checkpoint 2 completed (attempt 0)" in out.output
    assert "  - a on ?: app/m/a/2" in out.output
    out = runner.invoke(
        main, ["checkpoints", "show", "9", "--store", str(tmp_path), "--app-id", "app"]
    )
    assert out.exit_code == 1
    assert "checkpoint 9 of 'app'" in out.output


def _sample(metrics: Metrics, name: str, **labels: str) -> float:
    """A sample of ``metrics``, as the process exports it while it hosts the coordinator."""
    with metrics.coordinating():
        value = metrics.registry.get_sample_value(name, labels or None)
    return 0.0 if value is None else value


def test_executor_exports_checkpoint_metrics_and_keeps_the_failure_history(
    tmp_path: Path,
) -> None:
    events: list[Event] = []

    # Task b acknowledges only odd checkpoints: every even one times out after 3 s.
    def answer(m: Message) -> list[Message]:
        if isinstance(m, TriggerCheckpoint):
            tasks = ("a", "b") if m.checkpoint_id % 2 else ("a",)
            return [
                AcknowledgeCheckpoint(m.checkpoint_id, t, m.attempt, TaskSnapshot(f"app/m/{t}", state_size=1000, uploaded_size=10, alignment_ms=2.0, sync_ms=1.0, async_ms=3.0, member=f"w-{t}"))
                for t in tasks
            ]  # fmt: skip
        return []

    transport = FakeTransport(events, answer)
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    code = run_coordinator(
        job(tolerable_failures=5),
        frozenset({"a", "b"}),
        transport=transport,
        store=RecordingStore(tmp_path, events),
        clock=lambda: transport.now,
        should_stop=lambda: sum(isinstance(m, CheckpointAborted) for m in transport.sent()) >= 2,
        poll_timeout=0.25,
        metrics=metrics,
    )
    assert code == 0
    sent = transport.sent()
    completed = [m.checkpoint_id for m in sent if isinstance(m, CheckpointCompleted)]
    aborted = [m.checkpoint_id for m in sent if isinstance(m, CheckpointAborted)]
    assert completed == [1, 3] and aborted == [2, 4]
    assert _sample(metrics, "kstream_checkpoints_completed_total") == 2
    assert _sample(metrics, "kstream_checkpoints_failed_total", reason="timeout") == 2
    assert _sample(metrics, "kstream_checkpoint_duration_seconds_count") == 2
    assert _sample(metrics, "kstream_checkpoint_size_bytes_sum") == 4000
    assert _sample(metrics, "kstream_checkpoint_uploaded_bytes_sum") == 40
    assert _sample(metrics, "kstream_checkpoint_alignment_seconds_count") == 4
    assert _sample(metrics, "kstream_last_completed_checkpoint_id") == 3
    # The history: both timeouts with their reason and the task that did acknowledge.
    failures = list_failures(FileStore(tmp_path), "app")
    assert [(f.checkpoint_id, f.status, f.missing) for f in failures] == [
        (2, "failed", ("b",)),
        (4, "failed", ("b",)),
    ]
    assert failures[0].reason == "checkpoint 2 timed out after 3s: no acknowledgement from tasks b"
    assert list(failures[0].tasks) == ["a"] and failures[0].duration_ms == 3000

    runner = CliRunner()
    args = ["--store", str(tmp_path), "--app-id", "app"]
    out = runner.invoke(main, ["checkpoints", "list", *args])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[0].split() == [
        "id", "status", "ended", "(UTC)", "attempt", "duration", "size", "uploaded",
        "alignment", "slowest", "task", "/", "reason",
    ]  # fmt: skip
    assert [line.split()[:2] for line in lines[1:]] == [
        ["1", "completed"], ["2", "failed"], ["3", "completed"], ["4", "failed"],
    ]  # fmt: skip
    # completed: size, uploaded, the longest alignment and the slowest task
    assert lines[1].split()[5:] == ["2.0", "KiB", "20", "B", "2ms", "b", "(250ms)"]
    # failed: what the acknowledging task had, and the reason instead of a slowest task
    assert lines[2].split()[4:11] == ["3000ms", "1000", "B", "10", "B", "2ms", "checkpoint"]
    assert lines[2].endswith("checkpoint 2 timed out after 3s: no acknowledgement from tasks b")
    as_json = json.loads(runner.invoke(main, ["checkpoints", "list", "--json", *args]).output)
    assert [(r["checkpoint_id"], r["status"], r["reason_label"]) for r in as_json] == [
        (1, "completed", None), (2, "failed", "timeout"), (3, "completed", None),
        (4, "failed", "timeout"),
    ]  # fmt: skip
    shown = runner.invoke(main, ["checkpoints", "show", "3", "--tasks", *args])
    assert shown.exit_code == 0, shown.output
    table = [line.split() for line in shown.output.splitlines() if line.startswith("  a ")]
    assert table == [["a", "w-a", "2.0ms", "1.0ms", "3.0ms", "250ms", "1000", "B", "10", "B"]]
    failed = runner.invoke(main, ["checkpoints", "show", "2", "--tasks", *args])
    assert failed.exit_code == 0, failed.output
    assert "checkpoint 2 failed (attempt 0)" in failed.output
    assert "reason     checkpoint 2 timed out after 3s" in failed.output
    assert "  b                    (no acknowledgement)" in failed.output


def test_a_restarted_coordinator_exports_the_attempt_and_latest_checkpoint_at_once(
    tmp_path: Path,
) -> None:
    events: list[Event] = []
    transport = FakeTransport(events, acking("a", "b"))
    assert run(tmp_path, transport, events, until=6) == 0  # checkpoints 1..3 complete
    registry = CollectorRegistry()
    again = FakeTransport([], acking("a", "b"))
    seen: dict[str, float | None] = {}

    def look_then_stop() -> bool:  # what the endpoint shows while the coordinator runs
        for name in ("kstream_last_completed_checkpoint_id", "kstream_job_attempt",
                     "kstream_checkpoints_completed_total"):  # fmt: skip
            seen[name] = registry.get_sample_value(name)
        return True  # stops before its first trigger

    run_coordinator(
        job(),
        frozenset({"a", "b"}),
        transport=again,
        store=FileStore(tmp_path),
        clock=lambda: again.now,
        should_stop=look_then_stop,
        metrics=Metrics(registry),
    )
    assert seen == {
        "kstream_last_completed_checkpoint_id": 3,
        "kstream_job_attempt": 0,
        "kstream_checkpoints_completed_total": 0,
    }
    # Once it stopped, this process no longer speaks for the job.
    assert registry.get_sample_value("kstream_last_completed_checkpoint_id") is None


class OutageTransport(FakeTransport):
    """Worker w1 owns a and b and heartbeats every second; the third checkpoint's
    send waits out a 30 s outage of every broker (as CoordinatorChannel.send does),
    reported to ``reach`` when ``reports`` (else the loop cannot know of it)."""

    def __init__(self, events: list[Event], reports: bool) -> None:
        super().__init__(events, acking("a", "b"))
        if reports:
            self.reach = Reachability(300.0, clock=lambda: self.now)
        self._beat = self.now

    def open(self, timeout: float = 30.0) -> list[Message]:
        return [Resume(0, {"a": "w1", "b": "w1"})]

    def poll(self, timeout: float) -> list[Message]:
        out = super().poll(timeout)
        if self.now - self._beat >= 1.0:
            self._beat = self.now
            out.append(Heartbeat("w1", ("a", "b"), 0))
        return out

    def send(self, messages: Sequence[Message], timeout: float = 30.0) -> None:
        if any(isinstance(m, TriggerCheckpoint) and m.checkpoint_id == 3 for m in messages):
            reach = self.reach
            if reach is not None:
                reach.failed("no broker answers")
            self.now += 30.0
            if reach is not None:
                reach.ok()
            self._beat = self.now
        super().send(messages, timeout)


@pytest.mark.parametrize("reports", [True, False])
def test_an_outage_waited_out_in_a_send_loses_no_worker(tmp_path: Path, reports: bool) -> None:
    events: list[Event] = []
    transport = OutageTransport(events, reports)
    code = run_coordinator(
        job(),
        frozenset({"a", "b"}),
        transport=transport,
        store=RecordingStore(tmp_path, events),
        clock=lambda: transport.now,
        should_stop=lambda: transport.now > 1060.0,  # a minute of the fake clock
        poll_timeout=0.25,
        heartbeat_timeout=10.0,
    )
    assert code == 0
    triggered = [m.checkpoint_id for m in transport.sent() if isinstance(m, TriggerCheckpoint)]
    assert 3 in triggered  # the outage happened
    restores = [m for m in transport.sent() if isinstance(m, Restore)]
    # Told of the outage, the loop forgives the silence it caused; not told, it cannot.
    assert (restores == []) is reports, restores
