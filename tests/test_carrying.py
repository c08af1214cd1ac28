"""A silent worker's tasks carried at their last completed snapshot (docs/design.md §6.7,
kstream.protocol.carrying): the coordinator's side, and the worker's rule that a carried
task's output is not published. Pure state machines with a fake clock (no broker)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from kstream.checkpointstorage.file import FileStore
from kstream.checkpointstorage.metadata import (
    CheckpointMetadata,
    TaskSnapshot,
    carried_tasks,
    write_metadata,
)
from kstream.protocol.carrying import CARRY_AFTER_S, MIN_HOLD_LEAD_S, isolated_tasks
from kstream.protocol.commands import WriteMetadata
from kstream.protocol.failover import JobPhase
from kstream.protocol.messages import (
    CheckpointCompleted,
    Heartbeat,
    Message,
    Restore,
    Resume,
    TriggerCheckpoint,
)
from kstream.protocol.worker import WorkerProtocol
from kstream.worker.checkpointed import Checkpointed
from tests.test_coordinator import Harness, messages

OWNERS = {"a": "w1", "b": "w2", "c": "w3"}
ISOLATED: dict[str, Any] = {"internal_topics": {}, "operators": {}}
SHUFFLED: dict[str, Any] = {"internal_topics": {"k": 3}, "operators": {}}


def handle(task: str, n: int) -> str:
    return f"app/tasks/{task}/chk-{n}.json"


def started(description: dict[str, Any] | None = ISOLATED, *, cooperative: bool = False) -> Harness:
    """A coordinator started at 0.0 on the history of a job that runs tasks a, b, c on
    w1, w2, w3 in attempt 1."""
    h = Harness(
        tasks=OWNERS,
        history=[Resume(1, dict(OWNERS))],
        description=description,
        timeout=60.0,
        cooperative=cooperative,
    )
    h.start(0.0)
    return h


def job(description: dict[str, Any] | None = ISOLATED, *, cooperative: bool = False) -> Harness:
    """Tasks a, b, c on w1, w2, w3 running in attempt 1 (generation 4), checkpoint 1
    completed at 1.1 s (triggered at 1.0), every worker heard at 1.5 s."""
    h = started(description, cooperative=cooperative)
    beat(h, 0.0)
    assert trigger_of(h.tick(1.0)) == TriggerCheckpoint(1, 1, 1000)
    for task in OWNERS:
        h.ack(1, task, 1.1, attempt=1, handle=handle(task, 1))
    assert h.c.latest_completed is not None and h.c.latest_completed.checkpoint_id == 1
    beat(h, 1.5)
    return h


def beat(h: Harness, now: float, *members: str) -> list[Message]:
    out: list[Message] = []
    for m in members or ("w1", "w2", "w3"):
        out += messages(h.send(Heartbeat(m, tuple(t for t, o in OWNERS.items() if o == m), 4), now))
    return out


def trigger_of(cmds: list[Any]) -> TriggerCheckpoint | None:
    found = [m for m in messages(cmds) if isinstance(m, TriggerCheckpoint)]
    return found[0] if found else None


def metadata(h: Harness, n: int) -> CheckpointMetadata:
    written = [c.metadata for c in h.executed if isinstance(c, WriteMetadata)]
    return next(m for m in written if m.checkpoint_id == n)


def run_until(h: Harness, start: float, end: float, *alive: str) -> list[Message]:
    """Every 0.5 s from ``start`` to ``end``: ``alive`` heartbeat, the coordinator ticks,
    and every task of ``alive`` acknowledges each checkpoint triggered at once."""
    out: list[Message] = []
    t = start
    while t <= end + 1e-9:
        out += beat(h, t, *alive)
        sent = messages(h.tick(t))
        out += sent
        for trig in (m for m in sent if isinstance(m, TriggerCheckpoint)):
            for task, member in OWNERS.items():
                if member in alive:
                    snap = handle(task, trig.checkpoint_id)
                    out += messages(h.ack(trig.checkpoint_id, task, t, trig.attempt, snap))
        t = round(t + 0.5, 3)
    return out


def completed(out: list[Message]) -> list[int]:
    return [m.checkpoint_id for m in out if isinstance(m, CheckpointCompleted)]


def test_only_a_plan_without_internal_topics_has_isolated_tasks() -> None:
    assert isolated_tasks(ISOLATED)
    assert not isolated_tasks(SHUFFLED)
    assert not isolated_tasks(None)  # (unknown: never carried)


def test_a_silent_workers_tasks_are_carried_and_checkpoints_complete_without_it() -> None:
    h = job()
    # Checkpoint 2: w1 and w3 acknowledge, w2 (last heard at 1.5) says nothing.
    out = run_until(h, 2.0, 1.5 + CARRY_AFTER_S, "w1", "w3")
    assert completed(out) == []  # waiting for b: not silent for long enough yet
    out = run_until(h, 2.0 + CARRY_AFTER_S, 6.0, "w1", "w3")
    done = completed(out)
    assert done[0] == 2 and len(done) >= 2  # 2 at once, then the next ones go on
    for n in done:
        tasks = metadata(h, n).tasks
        assert tasks["b"].handle == handle("b", 1)  # carried at checkpoint 1
        assert (tasks["a"].handle, tasks["c"].handle) == (handle("a", n), handle("c", n))
        assert carried_tasks(metadata(h, n)) == {"b"}
    assert h.c.phase is JobPhase.RUNNING and h.c.attempt == 1  # nobody rolled back


def test_a_hold_checkpoint_comes_before_the_silent_worker_is_lost_so_the_change_is_a_hand_over() -> (
    None
):
    h = job()
    out = run_until(h, 2.0, 11.0, "w1", "w3")
    holds = [m for m in out if isinstance(m, TriggerCheckpoint) and m.hold]
    assert len(holds) == 1
    # Due at the last heartbeat + the heartbeat timeout - the lead (checkpoints took 0.1 s).
    assert holds[0].timestamp / 1000 == 1.5 + 10.0 - MIN_HOLD_LEAD_S
    hold = holds[0].checkpoint_id
    assert hold in completed(out) and h.c.handover.holding
    assert not [m for m in out if isinstance(m, TriggerCheckpoint) and m.checkpoint_id > hold]
    assert metadata(h, hold).tasks["b"].handle == handle("b", 1)
    # w2 is lost at 11.5: a hand-over at the hold checkpoint, at once (not a failure).
    out = run_until(h, 11.5, 12.0, "w1", "w3")
    restores = [m for m in out if isinstance(m, Restore)]
    assert [(r.attempt, r.checkpoint_id) for r in restores] == [(2, hold)]
    assert h.c.restore_points.choose() == hold


def test_a_carried_worker_heard_again_before_the_hold_is_carried_no_more() -> None:
    """Stalled, not dead (a user function that took 4 s): its tasks went on without
    being published; from its next heartbeat its acknowledgements count again, and no
    task rolls back."""
    h = job()
    run_until(h, 2.0, 6.0, "w1", "w3")
    assert h.c.carried.members == {"w2": ("b",)} and h.c.carried.hold_at is not None
    beat(h, 6.2, "w2")
    assert h.c.carried.members == {} and h.c.carried.hold_at is None
    out = run_until(h, 6.5, 14.0, "w1", "w2", "w3")
    assert h.c.phase is JobPhase.RUNNING and h.c.attempt == 1
    assert not [m for m in out if isinstance(m, Restore)]
    assert not [m for m in out if isinstance(m, TriggerCheckpoint) and m.hold]
    last = max(completed(out))
    assert metadata(h, last).tasks["b"].handle == handle("b", last)  # its own snapshot again
    assert carried_tasks(metadata(h, last)) == set()


def test_a_carried_worker_heard_again_after_the_hold_restores_every_task() -> None:
    h = job()
    out = run_until(h, 2.0, 11.0, "w1", "w3")
    hold = next(m.checkpoint_id for m in out if isinstance(m, TriggerCheckpoint) and m.hold)
    assert h.c.handover.holding
    beat(h, 11.2, "w2")  # heard before it was lost: the change is made now
    out = run_until(h, 11.5, 12.0, "w1", "w2", "w3")
    assert [(m.attempt, m.checkpoint_id) for m in out if isinstance(m, Restore)] == [(2, hold)]
    assert h.c.carried.members == {}


def test_nothing_is_carried_in_a_job_with_a_shuffle_or_an_unknown_plan() -> None:
    for description in (SHUFFLED, None):
        h = job(description)
        out = run_until(h, 2.0, 11.0, "w1", "w3")
        assert completed(out) == []  # checkpoint 2 waits for b, as before
        assert not [m for m in out if isinstance(m, TriggerCheckpoint) and m.hold]
        out = run_until(h, 11.5, 12.0, "w1", "w3")
        # Lost at 11.5: the ordinary failover, every task back to checkpoint 1.
        assert [(m.attempt, m.checkpoint_id) for m in out if isinstance(m, Restore)] == [(2, 1)]


def test_nothing_is_carried_when_no_other_worker_is_heard() -> None:
    h = job()
    run_until(h, 2.0, 6.0)  # nobody heartbeats
    assert h.c.carried.members == {}


def test_a_member_this_coordinator_never_heard_is_not_carried() -> None:
    """A coordinator that just started (elected after its host died) knows the owners
    from the control topic only: their silence until now says nothing."""
    h = started()
    h.c.latest_completed = CheckpointMetadata(
        1, 1, 0.0, 0.1, {t: TaskSnapshot(handle(t, 1)) for t in OWNERS}
    )
    out = run_until(h, 0.5, 6.0, "w1", "w3")
    assert h.c.carried.members == {} and completed(out) == []


def test_carried_tasks_are_those_whose_snapshot_is_of_another_checkpoint() -> None:
    meta = CheckpointMetadata(
        7,
        1,
        0.0,
        1.0,
        {
            "a": TaskSnapshot(handle("a", 7)),
            "b": TaskSnapshot(handle("b", 5)),
            "c": TaskSnapshot("app/savepoints/s1/tasks/c/sp.json"),  # (not numbered)
        },
    )
    assert carried_tasks(meta) == {"b"}


class Committer:
    def __init__(self) -> None:
        self.busy = False
        self.started: list[tuple[list[str], int]] = []

    def start(self, runners: list[Any], checkpoint_id: int) -> dict[str, Any]:
        self.started.append(([r.task_id for r in runners], checkpoint_id))
        return {}


def test_a_worker_does_not_publish_the_tasks_a_completion_carried(tmp_path: Path) -> None:
    """A worker frozen past the carry wakes up and reads the completions made without
    it: the output of its carried task is not published by them (the restore that
    follows restores that task from its carried snapshot, and publishes what that
    snapshot holds)."""
    store = FileStore(tmp_path)
    snaps = {"0_0": TaskSnapshot(handle("0_0", 9)), "1_0": TaskSnapshot(handle("1_0", 7))}
    write_metadata(store, "app", CheckpointMetadata(9, 1, 0.0, 1.0, snaps))
    runners = {t: SimpleNamespace(task_id=t, attempt=1) for t in snaps}
    tasks = SimpleNamespace(
        runners=runners,
        owned=lambda: list(runners.values()),
        ctx=SimpleNamespace(config=SimpleNamespace(app_id="app"), transactions=object()),
        aligner=SimpleNamespace(max_drift_ms={}),
    )
    protocol = WorkerProtocol("w1", now=0.0)
    m = Checkpointed(protocol, cast(Any, None), cast(Any, tasks), cast(Any, None),
                     cast(Any, store), cast(Any, SimpleNamespace()), "w1")  # fmt: skip
    committer = Committer()
    m._committer = cast(Any, committer)
    assert m.backed(CheckpointCompleted(9, 1))
    m._commit_sinks(9, 0.0)
    assert committer.started == [(["0_0"], 9)]
    # Carried no more (it heartbeat again): the next completion with its own snapshot
    # publishes the task, every epoch it sealed meanwhile included.
    own = {t: TaskSnapshot(handle(t, 10)) for t in snaps}
    write_metadata(store, "app", CheckpointMetadata(10, 1, 0.0, 1.0, own))
    assert m.backed(CheckpointCompleted(10, 1))
    m._commit_sinks(10, 0.0)
    assert committer.started[-1] == (["0_0", "1_0"], 10)
