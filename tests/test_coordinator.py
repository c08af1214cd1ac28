"""The checkpoint coordinator state machine, driven by messages and a fake clock (no broker):
the ``Harness`` other tests drive it with, triggering, completion, aborts and failures.
Failover is in ``tests/test_coordinator_failover.py``, the coordinator's start and
restart in ``tests/test_coordinator_restart.py``."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from kstream.checkpointstorage.file import FileStore
from kstream.checkpointstorage.metadata import (
    TaskSnapshot,
    completed_ids,
    latest_completed,
    write_metadata,
)
from kstream.config import CheckpointingConfig, RestartStrategy
from kstream.protocol.commands import (
    ApplyRetention,
    CleanupCheckpoint,
    Command,
    Fail,
    Send,
    WriteMetadata,
)
from kstream.protocol.coordinator import CheckpointCoordinator
from kstream.protocol.failover import JobPhase
from kstream.protocol.messages import (
    AcknowledgeCheckpoint,
    CheckpointAborted,
    CheckpointCompleted,
    CheckpointRequest,
    DeclineCheckpoint,
    Heartbeat,
    JobFailed,
    Message,
    Resume,
    TaskFailed,
    TriggerCheckpoint,
)
from kstream.protocol.recovery import recover


class Harness:
    """Executes the coordinator's commands like the real adapter, recording them in order."""

    def __init__(
        self,
        tasks: Iterable[str] = ("a", "b"),
        *,
        store: FileStore | None = None,
        history: list[Message] | None = None,
        fail_metadata: bool = False,
        restart: RestartStrategy | None = None,
        heartbeat_timeout: float = 10.0,
        description: dict[str, Any] | None = None,
        cooperative: bool = False,
        **checkpointing: Any,
    ) -> None:
        self.store = store
        # By default the job is already running in attempt 0 (its initial restore is
        # tested on its own below).
        if history is None:
            history = [Resume(0, {})]
        rec = None
        if history is not None or store is not None:
            rec = recover(
                history,
                completed_ids(store, "app") if store else [],
                latest_completed(store, "app") if store else None,
            )
        self.c = CheckpointCoordinator(
            frozenset(tasks),
            CheckpointingConfig(**{"interval": 1.0, "timeout": 5.0, **checkpointing}),
            restart
            or RestartStrategy(max_restarts=3, window=100.0, delay=0.5, restore_timeout=4.0),
            heartbeat_timeout=heartbeat_timeout,
            recovered=rec,
            description=description,
            cooperative=cooperative,
        )
        self.fail_metadata = fail_metadata
        self.executed: list[Command] = []

    def run(self, cmds: list[Command], now: float) -> list[Command]:
        out: list[Command] = []
        for cmd in cmds:
            self.executed.append(cmd)
            out.append(cmd)
            if isinstance(cmd, WriteMetadata):
                n = cmd.metadata.checkpoint_id
                if self.fail_metadata:
                    out += self.run(self.c.metadata_failed(n, "disk full", now), now)
                else:
                    if self.store is not None:
                        write_metadata(self.store, "app", cmd.metadata)
                    out += self.run(self.c.metadata_written(n, now), now)
        return out

    def start(self, now: float = 0.0) -> list[Command]:
        return self.run(self.c.start(now), now)

    def tick(self, now: float) -> list[Command]:
        return self.run(self.c.tick(now), now)

    def send(self, msg: Message, now: float) -> list[Command]:
        return self.run(self.c.handle(msg, now), now)

    def ack(
        self, n: int, task: str, now: float, attempt: int = 0, handle: str = ""
    ) -> list[Command]:
        ack = AcknowledgeCheckpoint(
            n,
            task,
            attempt,
            TaskSnapshot(handle or f"h/{task}/{n}", {f"in:{task}": n * 10}, state_size=100),
        )
        return self.send(ack, now)

    def sent(self) -> list[Message]:
        return [c.message for c in self.executed if isinstance(c, Send)]


def messages(cmds: list[Command]) -> list[Message]:
    return [c.message for c in cmds if isinstance(c, Send)]


def triggers(cmds: list[Command]) -> list[int]:
    return [m.checkpoint_id for m in messages(cmds) if isinstance(m, TriggerCheckpoint)]


# -- triggering --------------------------------------------------------------------------


def test_triggers_every_interval_and_waits_for_the_in_flight_one() -> None:
    h = Harness(tasks=["a"])
    assert h.start(0.0) == []
    assert h.tick(0.5) == []
    assert h.tick(1.0) == [Send(TriggerCheckpoint(1, 0, 1000))]
    assert h.tick(2.0) == []  # max_concurrent=1: checkpoint 1 still in flight
    h.ack(1, "a", 2.1)
    assert triggers(h.tick(2.1)) == [2]  # interval since the last trigger has passed
    h.ack(2, "a", 2.2)
    assert h.tick(3.0) == []
    assert triggers(h.tick(3.1)) == [3]


def test_min_pause_is_measured_from_the_end_of_the_previous_checkpoint() -> None:
    h = Harness(tasks=["a"], min_pause=2.0)
    h.start(0.0)
    assert triggers(h.tick(1.0)) == [1]
    h.ack(1, "a", 1.5)
    assert h.tick(2.0) == []
    assert h.tick(3.4) == []
    assert triggers(h.tick(3.5)) == [2]


def test_max_concurrent_bounds_checkpoints_in_flight() -> None:
    h = Harness(tasks=["a"], max_concurrent=2, timeout=100.0)
    h.start(0.0)
    assert triggers(h.tick(1.0)) == [1]
    assert triggers(h.tick(2.0)) == [2]
    assert h.tick(3.0) == []
    h.ack(1, "a", 3.5)
    assert triggers(h.tick(3.5)) == [3]
    assert sorted(h.c.pending) == [2, 3]


def test_next_trigger_in_says_when_tick_triggers_and_none_while_one_is_in_flight() -> None:
    h = Harness(tasks=["a"])
    h.start(0.0)
    assert h.c.next_trigger_in(0.25) == pytest.approx(0.75)
    assert h.tick(0.99) == [] and h.c.next_trigger_in(0.99) == pytest.approx(0.01)
    assert triggers(h.tick(1.0)) == [1]
    assert h.c.next_trigger_in(1.5) is None  # a checkpoint in flight: its ack comes first
    h.ack(1, "a", 1.2)
    assert h.c.next_trigger_in(1.2) == pytest.approx(0.8)
    assert h.c.next_trigger_in(2.5) == 0.0  # overdue: tick triggers at once
    assert triggers(h.tick(2.5)) == [2]


def test_next_trigger_in_counts_the_min_pause() -> None:
    h = Harness(tasks=["a"], min_pause=2.0)
    h.start(0.0)
    h.tick(1.0)
    h.ack(1, "a", 1.5)
    assert h.c.next_trigger_in(2.0) == pytest.approx(1.5)  # 2 s after the end at 1.5
    assert h.tick(3.4) == [] and triggers(h.tick(3.5)) == [2]


def test_a_requested_checkpoint_is_triggered_before_the_interval() -> None:
    h = Harness(tasks=["a"], interval=10.0)
    h.start(0.0)
    assert h.tick(1.0) == []
    assert h.send(CheckpointRequest("w1", 7, "stale attempt"), 1.1) == []
    assert h.tick(1.2) == []  # a request of another attempt is ignored
    assert h.send(CheckpointRequest("w1", 0, "graceful stop"), 1.3) == []
    assert h.tick(1.4) == [Send(TriggerCheckpoint(1, 0, 1400))]
    assert h.tick(1.5) == []  # one request, one checkpoint; then the interval again
    h.ack(1, "a", 1.6)
    assert h.send(CheckpointRequest("w1", 0, "graceful stop"), 1.7) == []
    assert h.tick(1.8) == [Send(TriggerCheckpoint(2, 0, 1800))]
    assert h.send(CheckpointRequest("w1", 0, "again"), 1.9) == []
    assert h.tick(2.0) == []  # checkpoint 2 in flight (max_concurrent 1): wait for it
    h.ack(2, "a", 2.1)
    assert h.tick(2.2) == [Send(TriggerCheckpoint(3, 0, 2200))]


# -- completion --------------------------------------------------------------------------


def test_completes_only_when_every_expected_task_acknowledged(tmp_path: Path) -> None:
    h = Harness(tasks=["a", "b", "c"], store=FileStore(tmp_path))
    h.start(0.0)
    h.tick(1.0)
    assert h.ack(1, "a", 1.1) == []
    assert h.ack(1, "b", 1.2) == []
    out = h.ack(1, "c", 1.4)
    assert [type(c) for c in out] == [WriteMetadata, Send, ApplyRetention]
    assert messages(out) == [CheckpointCompleted(1, 0)]
    assert out[2] == ApplyRetention(3)
    meta = latest_completed(FileStore(tmp_path), "app")
    assert meta is not None
    assert meta.checkpoint_id == 1
    assert {t: s.handle for t, s in meta.tasks.items()} == {
        "a": "h/a/1",
        "b": "h/b/1",
        "c": "h/c/1",
    }
    assert meta.tasks["b"].offsets == {"in:b": 10}
    assert meta.tasks["b"].ack_delay_ms == pytest.approx(200.0)
    assert meta.duration_ms == pytest.approx(400.0)
    assert meta.state_size == 300


def test_completion_is_announced_only_after_the_metadata_is_written() -> None:
    h = Harness(tasks=["a"])
    h.start(0.0)
    h.tick(1.0)
    # The state machine alone: the last ack yields ONLY the metadata write.
    cmds = h.c.handle(AcknowledgeCheckpoint(1, "a", 0, TaskSnapshot("h")), 1.2)
    assert [type(c) for c in cmds] == [WriteMetadata]
    assert h.c.tick(1.3) == []  # nothing announced while the write is outstanding
    after = h.c.metadata_written(1, 1.4)
    assert messages(after)[0] == CheckpointCompleted(1, 0)
    assert h.c.latest_completed is not None and h.c.latest_completed.checkpoint_id == 1


def test_failed_metadata_write_aborts_instead_of_announcing() -> None:
    h = Harness(tasks=["a"], fail_metadata=True)
    h.start(0.0)
    h.tick(1.0)
    out = h.ack(1, "a", 1.2, handle="h/a")
    assert messages(out) == [
        CheckpointAborted(1, "checkpoint 1: writing its metadata failed: disk full")
    ]
    assert CleanupCheckpoint(1, ("h/a",)) in out
    assert not any(isinstance(m, CheckpointCompleted) for m in h.sent())
    assert h.c.failures.successive_failures == 1


# -- aborts and failures -----------------------------------------------------------------


def test_timeout_aborts_and_cleans_up_naming_the_missing_tasks() -> None:
    h = Harness(tasks=["a", "b", "c"])
    h.start(0.0)
    h.tick(1.0)
    h.send(Heartbeat("w2", ("b",), 1), 2.0)
    h.ack(1, "a", 1.5, handle="h/a")
    assert h.tick(5.9) == []
    out = h.tick(6.0)
    assert out[:2] == [
        Send(
            CheckpointAborted(
                1,
                "checkpoint 1 timed out after 5s: no acknowledgement from tasks b, c "
                "(b last seen 4.0s ago on worker w2)",
            )
        ),
        CleanupCheckpoint(1, ("h/a",)),
    ]
    assert h.c.pending.keys() == {2}  # the freed slot was used for the next trigger
    # A late ack of the aborted checkpoint is ignored.
    assert h.ack(1, "b", 6.1) == []
    assert h.c.ignored_messages == 1


def test_decline_aborts() -> None:
    h = Harness()
    h.start(0.0)
    h.tick(1.0)
    out = h.send(DeclineCheckpoint(1, "b", 0, "disk full"), 1.2)
    assert messages(out) == [CheckpointAborted(1, "checkpoint 1 declined by task b: disk full")]
    assert h.c.pending == {}
    assert h.c.failures.successive_failures == 1


def test_a_checkpoint_counts_once() -> None:
    h = Harness(tolerable_failures=1)
    h.start(0.0)
    h.tick(1.0)
    h.send(DeclineCheckpoint(1, "a", 0, "x"), 1.1)
    assert h.send(DeclineCheckpoint(1, "b", 0, "y"), 1.2) == []
    assert h.tick(7.0)[:1] == [Send(TriggerCheckpoint(2, 0, 7000))]
    assert h.c.failures.successive_failures == 1
    assert h.c.phase is JobPhase.RUNNING


def _fail_by_timeout(h: Harness, now: float) -> float:
    """Let the checkpoint in flight (triggered now if none is) time out with only "a" acked.

    Returns the time of the timeout, at which the next checkpoint is triggered.
    """
    if not h.c.pending:
        assert len(triggers(h.tick(now))) == 1
    ((n, p),) = h.c.pending.items()
    h.ack(n, "a", p.trigger_time + 0.1)
    out = h.tick(p.trigger_time + 5.0)
    assert isinstance(messages(out)[0], CheckpointAborted)
    return p.trigger_time + 5.0


def test_more_than_tolerable_successive_failures_is_a_hard_failure() -> None:
    h = Harness(tolerable_failures=2)
    h.start(0.0)
    t = _fail_by_timeout(h, 1.0)  # checkpoint 1 (2 triggered at its timeout)
    t = _fail_by_timeout(h, t)  # 2
    assert h.c.phase is JobPhase.RUNNING
    assert list(h.c.pending) == [3]
    h.ack(3, "a", t + 0.1)
    out = h.tick(t + 5.0)
    reason = (
        "checkpoint 3 timed out after 5s: no acknowledgement from tasks b. "
        "3 successive checkpoints failed; tolerable_failures=2 -> job failed"
    )
    assert out[-2:] == [Send(JobFailed(reason)), Fail(reason)]
    assert h.c.phase is JobPhase.FAILED
    assert h.c.failed_reason == reason
    assert h.tick(t + 100.0) == []
    assert h.send(TaskFailed("a", "w", 0, "x"), t + 101.0) == []


def test_a_success_resets_the_failure_count() -> None:
    h = Harness(tolerable_failures=2)
    h.start(0.0)
    t = _fail_by_timeout(h, 1.0)
    t = _fail_by_timeout(h, t)
    assert h.c.failures.successive_failures == 2
    h.ack(3, "a", t + 0.1)
    h.ack(3, "b", t + 0.2)
    assert h.c.failures.successive_failures == 0
    t = _fail_by_timeout(h, t + 2.0)
    t = _fail_by_timeout(h, t)
    assert h.c.phase is JobPhase.RUNNING
    t = _fail_by_timeout(h, t)
    assert h.c.phase is JobPhase.FAILED


def test_late_duplicate_stale_and_unknown_acks_are_ignored(tmp_path: Path) -> None:
    h = Harness(store=FileStore(tmp_path))
    h.start(0.0)
    h.tick(1.0)
    assert h.ack(1, "a", 1.1, handle="first") == []
    assert h.ack(1, "a", 1.2, handle="second") == []  # duplicate: the first counts
    assert h.ack(1, "b", 1.3, attempt=7) == []  # stale/foreign attempt
    assert h.ack(99, "b", 1.3) == []  # unknown checkpoint
    assert h.ack(1, "zzz", 1.3) == []  # not a task of the plan
    assert h.c.pending[1].missing == ["b"]
    out = h.ack(1, "b", 1.4)
    assert messages(out)[0] == CheckpointCompleted(1, 0)
    assert h.ack(1, "b", 1.5) == []  # late: already complete
    assert h.c.ignored_messages == 5
    meta = latest_completed(FileStore(tmp_path), "app")
    assert meta is not None and meta.tasks["a"].handle == "first"


def test_a_completion_subsumes_older_checkpoints_without_counting_them() -> None:
    h = Harness(tasks=["a"], max_concurrent=2, timeout=100.0)
    h.start(0.0)
    h.tick(1.0)
    h.tick(2.0)
    out = h.ack(2, "a", 2.5)
    assert messages(out) == [
        CheckpointCompleted(2, 0),
        CheckpointAborted(1, "subsumed by checkpoint 2"),
    ]
    assert h.c.failures.successive_failures == 0
