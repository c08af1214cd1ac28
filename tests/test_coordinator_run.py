"""The coordinator loop and its command executor, with a fake control topic and fake clock."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from click.testing import CliRunner

from kstream.checkpoint.messages import (
    AcknowledgeCheckpoint,
    CheckpointAborted,
    CheckpointCompleted,
    JobFailed,
    Message,
    Resume,
    TriggerCheckpoint,
)
from kstream.cli import main
from kstream.config import CheckpointingConfig, JobConfig
from kstream.kafka.control import CoordinatorFenced
from kstream.process.coordinator import run_coordinator
from kstream.store.base import StoreError
from kstream.store.file import FileStore
from kstream.store.layout import metadata_path

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
                AcknowledgeCheckpoint(m.checkpoint_id, t, m.attempt, f"app/m/{t}/{m.checkpoint_id}")
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
    assert events[:4] == [
        ("send", TriggerCheckpoint(1, 0, 1_001_000)),
        ("write", metadata_path("app", 1)),
        ("send", CheckpointCompleted(1, 0)),
        ("send", TriggerCheckpoint(2, 0, 1_002_000)),
    ]
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
    assert [(r[0], r[2], r[3], r[4], r[5]) for r in rows] == [
        ("1", "0", "0", "2", "250ms"),
        ("2", "0", "0", "2", "250ms"),
        ("3", "0", "0", "2", "250ms"),
    ]
    out = runner.invoke(
        main, ["checkpoints", "show", "2", "--store", str(tmp_path), "--app-id", "app"]
    )
    assert out.exit_code == 0, out.output
    assert "checkpoint 2 (attempt 0)" in out.output
    assert "  - a on ?: app/m/a/2" in out.output
    out = runner.invoke(
        main, ["checkpoints", "show", "9", "--store", str(tmp_path), "--app-id", "app"]
    )
    assert out.exit_code == 1
    assert "checkpoint 9 of 'app'" in out.output
