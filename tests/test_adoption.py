"""A silent worker's carried tasks adopted by the worker the group gives them, every other
task running on (cooperative assignment, docs/design.md §6.8, kstream.protocol.adoption):
the coordinator's side and the worker protocol's. Pure state machines with a fake clock."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kstream.checkpointstorage.metadata import CheckpointMetadata, TaskSnapshot, carried_tasks
from kstream.protocol.adoption import ADOPT_WAIT_S
from kstream.protocol.commands import Send
from kstream.protocol.failover import JobPhase
from kstream.protocol.handover import LEAVING
from kstream.protocol.messages import (
    REASSIGNED,
    AcknowledgeCheckpoints,
    Adopt,
    AdoptRequest,
    CheckpointRequest,
    Heartbeat,
    Message,
    Restore,
    Resume,
    TaskFailed,
    TriggerCheckpoint,
    WorkerStopped,
)
from kstream.protocol.recovery import recover
from kstream.protocol.worker import WorkerProtocol
from kstream.protocol.workerevents import (
    AdoptTasks,
    Assigned,
    DropTasks,
    StopRequested,
    StopTasks,
)
from tests.test_carrying import ISOLATED, OWNERS, completed, handle, job, metadata, started
from tests.test_coordinator import Harness, messages


def cycle(
    h: Harness,
    start: float,
    end: float,
    runs: Mapping[str, tuple[str, ...]],
    generation: int = 4,
    acked: Mapping[str, tuple[str, ...]] | None = None,
) -> list[Message]:
    """Every 0.5 s from ``start`` to ``end``: each member of ``runs`` heartbeats with its
    tasks, the coordinator ticks, and each member acknowledges its tasks (or those
    ``acked`` says) of every checkpoint triggered (one message per member, as workers do)."""
    out: list[Message] = []
    t = start
    while t <= end + 1e-9:
        for member, tasks in runs.items():
            out += messages(h.send(Heartbeat(member, tasks, generation), t))
        sent = messages(h.tick(t))
        out += sent
        for trig in (m for m in sent if isinstance(m, TriggerCheckpoint)):
            for member, tasks in (runs if acked is None else acked).items():
                out += ack(h, trig.checkpoint_id, member, tasks, t)
        t = round(t + 0.5, 3)
    return out


def ack(h: Harness, n: int, member: str, tasks: tuple[str, ...], now: float) -> list[Message]:
    snaps = {t: TaskSnapshot(handle(t, n), {f"in:{t}": n * 10}, state_size=100) for t in tasks}
    return messages(h.send(AcknowledgeCheckpoints(n, 1, member, snaps), now))


LIVE: dict[str, tuple[str, ...]] = {"w1": ("a",), "w3": ("c",)}


def carried_b() -> Harness:
    """w2 (task b) silent since 1.5 s: b carried at checkpoint 1 from 4.5 s on."""
    h = job(cooperative=True)
    h.send(Heartbeat("w2", ("b",), 4, producer="app.sink.worker.w2"), 1.5)  # (its sinks')
    out = cycle(h, 2.0, 6.0, LIVE)
    assert completed(out) and h.c.carried.snapshots.keys() == {"b"}
    return h


def test_carried_tasks_are_adopted_by_the_worker_the_group_gives_them_and_nothing_restores() -> (
    None
):
    h = carried_b()
    # The group's change (w2's session ended): w1 and w3 see generation 5; w1 got b.
    out = cycle(h, 6.5, 6.5, LIVE, generation=5)
    assert not [m for m in out if isinstance(m, Restore)]
    in_flight = set(h.c.pending)
    first_own = h.c.next_checkpoint_id
    latest = h.c.latest_completed
    assert latest is not None and latest.tasks["b"].handle == handle("b", 1)  # (carried)
    out = messages(h.send(AdoptRequest("w1", 1, 5, ("b",)), 6.6))
    # (w2's sinks fenced first: a publication it left open is aborted at once)
    assert out == [Adopt(1, "w1", latest.checkpoint_id, ("b",), ("app.sink.worker.w2",))]
    assert h.c.failover.owners["b"] == "w1"
    # w1 runs a and b from now on; w2 stays silent, and is never lost with a restore.
    runs = {"w1": ("a", "b"), "w3": ("c",)}
    out = cycle(h, 7.0, 20.0, runs, generation=5)
    assert not [m for m in out if isinstance(m, Restore)]
    assert h.c.phase is JobPhase.RUNNING and h.c.attempt == 1
    assert not [m for m in out if isinstance(m, TriggerCheckpoint) and m.hold]
    done = completed(out)
    for n in in_flight:  # (in flight at the adoption: b carried, not w1's)
        assert metadata(h, n).tasks["b"].handle == handle("b", 1)
    later = [n for n in done if n >= first_own]
    assert len(later) >= 5
    for n in later:  # the adopter's own snapshots (it acknowledges at once here)
        assert metadata(h, n).tasks["b"].handle == handle("b", n)
        assert carried_tasks(metadata(h, n)) == set()
    assert h.c.carried.snapshots == {} and h.c.carried.members == {}
    assert "w2" not in h.c.members.seen


def test_no_checkpoint_waits_for_the_adopter_and_none_goes_back_to_the_carried_snapshot() -> None:
    h = carried_b()
    messages(h.send(AdoptRequest("w1", 1, 5, ("b",)), 6.6))
    # The adopter still restores b (its heartbeats do not name it yet): the checkpoints
    # complete, b carried.
    runs = {"w1": ("a", "b"), "w3": ("c",)}
    out = cycle(h, 7.0, 10.0, LIVE, generation=5)
    late = completed(out)
    assert len(late) >= 2
    assert all(metadata(h, n).tasks["b"].handle == handle("b", 1) for n in late)
    # One completes with the adopter's own snapshot of b: never carried again after it.
    out = cycle(h, 10.5, 11.5, runs, generation=5)
    own = completed(out)
    assert own and metadata(h, own[0]).tasks["b"].handle == handle("b", own[0])
    assert h.c.carried.snapshots == {} and h.c.carried.adopted == {}
    cycle(h, 12.0, 14.0, runs, generation=5, acked=LIVE)  # b's acknowledgement late again
    assert h.c.pending and all("b" not in p.acks for p in h.c.pending.values())


def test_a_zombies_snapshots_of_a_task_adopted_from_it_are_ignored() -> None:
    h = carried_b()
    messages(h.send(AdoptRequest("w1", 1, 5, ("b",)), 6.6))
    runs = {"w1": ("a", "b"), "w3": ("c",)}
    cycle(h, 7.0, 8.0, runs, generation=5)
    assert h.c.carried.snapshots == {}  # (a checkpoint completed with w1's own b)
    n = h.c.next_checkpoint_id
    cycle(h, 8.5, 9.5, runs, generation=5, acked=LIVE)  # n triggered; w1 acks a, not yet b
    assert n in h.c.pending
    # w2 wakes: its stale heartbeat (generation 4) restores nothing, and its snapshot
    # of b does not stand for b.
    out = messages(h.send(Heartbeat("w2", ("b",), 4), 9.6))
    assert not [m for m in out if isinstance(m, Restore)]
    zombie = TaskSnapshot("zombie/b", {"in:b": 999}, state_size=1)
    out = messages(h.send(AcknowledgeCheckpoints(n, 1, "w2", {"b": zombie}), 9.7))
    assert n in h.c.pending and not completed(out)
    out = ack(h, n, "w1", ("b",), 9.8)
    assert completed(out) == [n]
    assert metadata(h, n).tasks["b"].handle == handle("b", n)
    assert h.c.phase is JobPhase.RUNNING


def test_tasks_that_were_not_carried_are_restored_not_adopted() -> None:
    h = carried_b()
    out = messages(h.send(AdoptRequest("w3", 1, 5, ("a",)), 6.6))  # a's owner w1 is alive
    assert not [m for m in out if isinstance(m, Adopt)]
    assert h.c.phase is JobPhase.SUSPENDED
    assert "no adoption: tasks a were not carried" in h.c.failover.failure_reason


def test_without_cooperative_assignment_a_request_to_adopt_restores() -> None:
    h = job()  # (range assignment: every rebalance revokes every task)
    cycle(h, 2.0, 6.0, LIVE)
    assert h.c.carried.snapshots.keys() == {"b"}
    messages(h.send(AdoptRequest("w1", 1, 5, ("b",)), 6.6))
    assert h.c.phase is JobPhase.SUSPENDED
    assert "the job does not adopt tasks" in h.c.failover.failure_reason


def test_no_hold_checkpoint_with_cooperative_assignment_and_a_failover_if_nobody_adopts() -> None:
    h = carried_b()
    # The group never moves b: w2 is lost ADOPT_WAIT_S after its heartbeat timeout.
    out = cycle(h, 6.5, 1.5 + 10.0 + ADOPT_WAIT_S, LIVE)
    assert not [m for m in out if isinstance(m, TriggerCheckpoint) and m.hold]
    assert not [m for m in out if isinstance(m, Restore)]
    out = cycle(h, 17.5, 18.5, LIVE)
    assert [r.checkpoint_id for r in out if isinstance(r, Restore)]
    assert "worker w2 lost" in h.c.failover.failure_reason


def test_a_carried_task_is_carried_at_its_owners_own_snapshot_once_one_completes() -> None:
    """w2 acknowledged checkpoint 2 before it fell silent, and checkpoint 2 completed only
    after b was carried (at 1): the later checkpoints carry b at 2, never at 1 again."""
    h = job(cooperative=True)
    cycle(h, 2.0, 2.0, {"w3": ("c",)})  # checkpoint 2 triggered; c acknowledges it
    ack(h, 2, "w2", ("b",), 2.1)  # w2's own, then silence
    t = 2.5
    while t <= 5.0:  # a's acknowledgement is late: 2 waits past the carry
        h.send(Heartbeat("w1", ("a",), 4), t)
        cycle(h, t, t, {"w3": ("c",)})
        t += 0.5
    assert h.c.carried.snapshots["b"].handle == handle("b", 1) and 2 in h.c.pending
    out = ack(h, 2, "w1", ("a",), 5.1)
    out += cycle(h, 5.5, 9.0, LIVE)
    done = completed(out)
    assert 2 in done and metadata(h, 2).tasks["b"].handle == handle("b", 2)
    assert len([k for k in done if k > 2]) >= 2
    for n in (k for k in done if k > 2):
        assert metadata(h, n).tasks["b"].handle == handle("b", 2)


# -- the worker protocol -------------------------------------------------------------------


def running(cooperative: bool = True) -> WorkerProtocol:
    """A worker running a in attempt 1 of generation 4."""
    p = WorkerProtocol("w1", now=0.0, cooperative=cooperative)
    p.handle(Assigned("w1", 4, ("a",), True), 0.0)
    p.handle(Restore(1, None), 0.0)
    p.handle(Resume(1, {"a": "w1"}), 0.1)
    assert p.running == {"a"} and not p.restoring
    return p


def sent(cmds: Sequence[object]) -> list[Message]:
    return [c.message for c in cmds if isinstance(c, Send)]


def test_a_worker_given_more_partitions_cooperatively_asks_to_adopt_and_runs_on() -> None:
    p = running()
    cmds = p.handle(Assigned("w1", 5, ("a", "b"), True), 1.0)
    assert not [c for c in cmds if isinstance(c, StopTasks)]
    assert AdoptRequest("w1", 1, 5, ("b",)) in sent(cmds)
    assert p.running == {"a"}
    cmds = p.handle(Adopt(1, "w1", 7, ("b",), ("tx",)), 1.2)
    assert cmds[0] == AdoptTasks(1, 7, frozenset({"b"}), ("tx",))
    assert p.running == {"a", "b"}
    hb = p.current_heartbeat()
    assert hb is not None and hb.tasks == ("a", "b")
    assert p.handle(Adopt(1, "w9", 7, ("b",)), 1.3) == [DropTasks(frozenset({"b"}))]  # lost it


def test_a_worker_that_lost_a_task_cooperatively_stops_and_reports_as_before() -> None:
    p = running()
    cmds = p.handle(Assigned("w1", 5, ("b",), True), 1.0)  # a revoked, b given
    assert StopTasks() in cmds or StopTasks(keep_held=False) in cmds
    assert TaskFailed("b", "w1", 1, REASSIGNED) in sent(cmds)
    assert not [m for m in sent(cmds) if isinstance(m, AdoptRequest)]


def test_with_range_assignment_a_worker_never_asks_to_adopt() -> None:
    p = running(cooperative=False)
    cmds = p.handle(Assigned("w1", 5, ("a", "b"), True), 1.0)
    assert StopTasks() in cmds
    assert not [m for m in sent(cmds) if isinstance(m, AdoptRequest)]


def test_a_fresh_coordinator_carries_and_adopts_the_tasks_of_an_owner_it_never_heard() -> None:
    """The dead worker hosted the coordinator: its successor, elected after it, never heard
    it; the group gave its partitions to w1, which asks to adopt them."""
    h = started(cooperative=True)
    h.c.latest_completed = CheckpointMetadata(
        1, 1, 0.0, 0.1, {t: TaskSnapshot(handle(t, 1)) for t in OWNERS}
    )
    out = cycle(h, 0.5, 1.0, LIVE, generation=5)
    n = max(h.c.pending)  # waits for b, whose owner is silent
    out = messages(h.send(AdoptRequest("w1", 1, 5, ("b",)), 1.2))
    assert out[0] == Adopt(1, "w1", 1, ("b",))
    assert completed(out) == [n]  # (it waited only for b: carried now)
    assert metadata(h, n).tasks["b"].handle == handle("b", 1)
    out = cycle(h, 1.5, 16.0, {"w1": ("a", "b"), "w3": ("c",)}, generation=5)
    assert not [m for m in out if isinstance(m, Restore)]
    assert h.c.phase is JobPhase.RUNNING and h.c.attempt == 1


def test_a_restarted_coordinator_knows_the_owners_adoptions_made() -> None:
    history: list[Message] = [Resume(1, dict(OWNERS)), Adopt(1, "w1", 3, ("b",))]
    assert recover(history, [], None).owners == {"a": "w1", "b": "w1", "c": "w3"}
    assert recover([*history, Restore(2, 3)], [], None).owners == {}
    assert recover([*history, Restore(2, 3), Resume(2, dict(OWNERS))], [], None).owners == OWNERS
    assert recover([Resume(2, dict(OWNERS)), Adopt(1, "w1", 3, ("b",))], [], None).owners == (
        OWNERS  # (an adoption of an earlier attempt)
    )
    h = Harness(tasks=OWNERS, history=history, description=ISOLATED, cooperative=True)
    h.start(0.0)
    out = cycle(h, 0.5, 8.0, {"w1": ("a", "b"), "w3": ("c",)}, generation=5)
    assert not [m for m in out if isinstance(m, Restore)] and completed(out)


def test_a_leaver_drains_without_holding_the_others_and_its_tasks_are_adopted() -> None:
    """Cooperative assignment: a worker stopping gracefully asks for a checkpoint, not a
    hand-over (nothing else holds); once it stopped, its tasks are carried at its final
    snapshots, and the worker the group gives them adopts them: no restore."""
    h = job(cooperative=True)
    h.send(Heartbeat("w2", ("b",), 4, producer="app.sink.worker.w2"), 1.5)
    messages(h.send(CheckpointRequest("w2", 1, LEAVING), 1.6))
    out = cycle(h, 1.7, 1.7, {**LIVE, "w2": ("b",)})
    final = [m for m in out if isinstance(m, TriggerCheckpoint)]
    assert [t.hold for t in final] == [False]  # (at once, not at the interval)
    assert completed(out) == [final[0].checkpoint_id]
    out = messages(h.send(WorkerStopped("w2", 1, "stopping: the final checkpoint completed"), 1.8))
    assert h.c.carried.snapshots["b"].handle == handle("b", final[0].checkpoint_id)
    h.send(Heartbeat("w2", ("b",), 4), 1.9)  # (its last one, read after it stopped)
    assert "w2" in h.c.carried.members
    out = cycle(h, 2.0, 3.0, LIVE)  # checkpoints complete without w2
    assert completed(out)
    out = messages(h.send(AdoptRequest("w1", 1, 5, ("b",)), 3.1))
    latest = h.c.latest_completed
    assert latest is not None
    assert out[0] == Adopt(1, "w1", latest.checkpoint_id, ("b",), ("app.sink.worker.w2",))
    out = cycle(h, 3.5, 12.0, {"w1": ("a", "b"), "w3": ("c",)}, generation=5)
    assert not [m for m in out if isinstance(m, Restore)]
    assert h.c.phase is JobPhase.RUNNING and h.c.attempt == 1


def test_a_stopping_worker_given_partitions_leaves_them_to_their_next_owner() -> None:
    p = running()
    p.handle(StopRequested(), 0.5)
    cmds = p.handle(Assigned("w1", 5, ("a", "b"), True), 1.0)
    assert not [c for c in cmds if isinstance(c, StopTasks)]
    assert not [m for m in sent(cmds) if isinstance(m, AdoptRequest | TaskFailed)]
    assert p.running == {"a"}  # (it drains on; b adopted by whoever gets it next)


def test_a_request_to_adopt_is_asked_again_until_the_coordinator_answers() -> None:
    """Read by a coordinator that then stopped (hosted by the worker that left), a
    request is read by no other: the worker asks again every second."""
    p = running()
    first = sent(p.handle(Assigned("w1", 5, ("a", "b"), True), 1.0))
    request = AdoptRequest("w1", 1, 5, ("b",))
    assert request in first
    assert request not in sent(p.tick(1.5))
    assert request in sent(p.tick(2.1))
    p.handle(Adopt(1, "w1", 7, ("b",)), 2.5)
    assert request not in sent(p.tick(4.0)) + sent(p.tick(6.0))


def test_a_request_asked_again_after_the_adoption_changes_nothing() -> None:
    h = carried_b()
    messages(h.send(AdoptRequest("w1", 1, 5, ("b",)), 6.6))
    assert messages(h.send(AdoptRequest("w1", 1, 5, ("b",)), 7.6)) == []
    assert h.c.phase is JobPhase.RUNNING and h.c.failover.owners["b"] == "w1"


def test_a_worker_that_reads_another_adopt_its_tasks_drops_them_at_once() -> None:
    """A zombie (frozen past its session, thawed) reads the Adopt of its tasks before any
    trigger written after it: it stops them there, so it never takes a snapshot of them
    for a checkpoint the adopter's snapshot goes to (the same manifest path)."""
    p = running()
    assert p.handle(Adopt(1, "w9", 7, ("a", "z")), 1.0) == [DropTasks(frozenset({"a"}))]
    assert p.running == set() and p.tasks == set()
    assert p.handle(Adopt(1, "w9", 7, ("z",)), 1.1) == []  # (none of its tasks)
