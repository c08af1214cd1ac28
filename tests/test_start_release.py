"""Cooperative workers that start together (docs/design.md §6.8): they join the group one
after the other, so the first is given every partition, readies every task, and may be
named their owner in a ``Resume`` it has not read yet when the next member's join takes
some of them. Before, that revocation released nothing (the worker still counted itself
restoring), the joiner's request to adopt them found them not carried, and every task
restored once more (attempt 2). Now the worker releases them during its restore too, and
the joiner asks to adopt what the ``Resume`` named another member for. The worker
protocols and the coordinator, fed the control topic in its one order; pure, with a fake
clock."""

from __future__ import annotations

from collections.abc import Sequence

from kstream.protocol.commands import Send
from kstream.protocol.elasticmessages import released_by
from kstream.protocol.failover import JobPhase
from kstream.protocol.messages import (
    Adopt,
    AdoptRequest,
    Heartbeat,
    Message,
    Restore,
    Resume,
    TaskReady,
    TasksReady,
    TasksReleased,
    TriggerCheckpoint,
)
from kstream.protocol.worker import WorkerProtocol
from kstream.protocol.workerevents import AdoptTasks, Assigned, DropTasks, ResumeTasks
from tests.test_carrying import ISOLATED
from tests.test_coordinator import Harness, messages

TASKS = ("a", "b", "c")


def sent(cmds: Sequence[object]) -> list[Message]:
    return [c.message for c in cmds if isinstance(c, Send)]


def readied(msgs: list[Message]) -> set[str]:
    out: set[str] = set()
    for m in msgs:
        if isinstance(m, TasksReady):
            out |= set(m.tasks)
        elif isinstance(m, TaskReady):
            out.add(m.task_id)
    return out


def first_start() -> tuple[Harness, Restore]:
    """A cooperative job's coordinator at its first start: it asks every task to restore
    from the start positions (attempt 1)."""
    h = Harness(tasks=TASKS, history=[], description=ISOLATED, timeout=60.0, cooperative=True)
    h.start(0.0)
    (restore,) = [m for m in messages(h.tick(0.1)) if isinstance(m, Restore)]
    assert restore == Restore(1, None)
    return h, restore


def feed(h: Harness, msgs: list[Message], now: float) -> list[Message]:
    out: list[Message] = []
    for m in msgs:
        out += messages(h.send(m, now))
    return out


def w1_readies_everything(h: Harness, restore: Restore) -> tuple[WorkerProtocol, list[Message]]:
    """w1, first in the group (generation 1), is given every partition and readies a, b, c."""
    w1 = WorkerProtocol("w1", now=0.0, cooperative=True)
    w1.handle(Assigned("w1", 1, TASKS, True), 0.2)
    ready = sent(w1.handle(restore, 0.2))
    assert readied(ready) == set(TASKS) and w1.restoring
    return w1, ready


def test_the_resume_written_before_the_join_took_tasks_adopts_them_and_nothing_restores() -> None:
    h, restore = first_start()
    w1, ready = w1_readies_everything(h, restore)
    (resume,) = [m for m in feed(h, ready, 0.3) if isinstance(m, Resume)]
    assert resume.owners == dict.fromkeys(TASKS, "w1")
    # w2 joins before w1 read that Resume: the group takes b and c from w1, whose
    # revocation callback releases them (written before w2 can be given them).
    released = w1.release(("a",), 1)
    assert released == TasksReleased("w1", 1, 1, ("b", "c"))
    out = feed(h, [released], 0.4)
    assert not [m for m in out if isinstance(m, Restore)]
    assert h.c.failover.owners["b"] == released_by("w1")
    # w1's assignment after the poll: b and c stopped, a readied again (the coordinator
    # runs: no effect); then it reads the Resume and runs a only.
    cmds = w1.handle(Assigned("w1", 2, ("a",), True), 0.5)
    assert cmds[0] == DropTasks(frozenset({"b", "c"}), released=True)
    assert feed(h, sent(cmds), 0.5) == []
    assert w1.handle(resume, 0.6)[0] == ResumeTasks(frozenset({"a"}))
    assert w1.running == {"a"}
    # w2 started at the Restore and is given b and c in generation 2: it readies them, and
    # at the Resume (which names w1) asks to adopt them.
    w2 = WorkerProtocol("w2", now=0.0, cooperative=True)
    w2.learn([restore])
    cmds = w2.handle(Assigned("w2", 2, ("b", "c"), True), 0.5)
    assert readied(sent(cmds)) == {"b", "c"}
    assert feed(h, sent(cmds), 0.5) == []
    cmds = w2.handle(resume, 0.6)
    assert cmds[0] == ResumeTasks(frozenset())
    request = AdoptRequest("w2", 1, 2, ("b", "c"))
    assert request in sent(cmds)
    assert request in sent(w2.tick(1.7))  # asked again until answered
    out = feed(h, [request], 1.8)
    adopt = Adopt(1, "w2", None, ("b", "c"), ())
    assert out == [adopt]
    cmds = w2.handle(adopt, 1.9)
    assert cmds[0] == AdoptTasks(1, None, frozenset({"b", "c"}), ())
    assert w1.handle(adopt, 1.9) == []
    assert w2.running == {"b", "c"}
    assert request not in sent(w2.tick(3.0))  # answered: asked no more
    # The first checkpoint completes with both workers' snapshots; still attempt 1.
    beats: list[Message] = [Heartbeat("w1", ("a",), 2), Heartbeat("w2", ("b", "c"), 2)]
    feed(h, beats, 2.0)
    triggers = [m for m in messages(h.tick(2.0)) if isinstance(m, TriggerCheckpoint)]
    assert [t.checkpoint_id for t in triggers] == [1]
    for task, member in (("a", "w1"), ("b", "w2"), ("c", "w2")):
        h.ack(1, task, 2.1, attempt=1, handle=f"{task}-1")
        assert h.c.failover.owners[task] == member
    latest = h.c.latest_completed
    assert latest is not None and latest.checkpoint_id == 1
    assert h.c.phase is JobPhase.RUNNING and h.c.attempt == 1
    assert not [c for c in h.executed if isinstance(c, Send) and isinstance(c.message, Restore)][1:]


def test_a_release_read_during_the_restore_keeps_the_resume_waiting_for_the_new_owner() -> None:
    h, restore = first_start()
    w1 = WorkerProtocol("w1", now=0.0, cooperative=True)
    w1.handle(Assigned("w1", 1, ("a", "b"), True), 0.2)
    ready_w1 = sent(w1.handle(restore, 0.2))
    assert feed(h, ready_w1, 0.3) == []  # c has no owner yet
    released = w1.release(("a",), 1)
    assert released == TasksReleased("w1", 1, 1, ("b",))
    assert feed(h, [released], 0.4) == []
    # w3 readies c in generation 1 (its assignment came before w2's join): before, that
    # completed the restore with w1 named the owner of b, which it released.
    assert feed(h, [TaskReady(1, "c", "w3", 1)], 0.5) == []
    assert h.c.phase is JobPhase.RESTORING
    # The next generation: w1 a, w2 b, w3 c; the Resume names w2 for b.
    out = feed(
        h, [TaskReady(1, "b", "w2", 2), TaskReady(1, "a", "w1", 2), TaskReady(1, "c", "w3", 2)], 0.6
    )
    (resume,) = [m for m in out if isinstance(m, Resume)]
    assert resume.owners == {"a": "w1", "b": "w2", "c": "w3"}


def test_a_release_in_an_older_generation_than_the_ready_changes_nothing() -> None:
    h, _restore = first_start()
    feed(h, [TaskReady(1, "a", "w1", 2)], 0.3)
    assert feed(h, [TasksReleased("w1", 1, 1, ("a",))], 0.4) == []
    out = feed(h, [TaskReady(1, "b", "w2", 2), TaskReady(1, "c", "w3", 2)], 0.5)
    (resume,) = [m for m in out if isinstance(m, Resume)]
    assert resume.owners == {"a": "w1", "b": "w2", "c": "w3"}


def test_a_restoring_worker_releases_only_cooperatively_without_a_hold_and_not_stopping() -> None:
    for cooperative in (True, False):
        w = WorkerProtocol("w1", now=0.0, cooperative=cooperative)
        w.handle(Assigned("w1", 1, TASKS, True), 0.0)
        w.handle(Restore(1, None), 0.1)
        got = w.release(("a",), 1)
        assert got == (TasksReleased("w1", 1, 1, ("b", "c")) if cooperative else None)
    from kstream.protocol.workerevents import StopRequested

    stopping = WorkerProtocol("w1", now=0.0, cooperative=True)
    stopping.handle(Assigned("w1", 1, TASKS, True), 0.0)
    stopping.handle(Restore(1, None), 0.1)
    stopping.handle(StopRequested(), 0.2)
    assert stopping.release(("a",), 1) is None
    nothing_lost = WorkerProtocol("w1", now=0.0, cooperative=True)
    nothing_lost.handle(Assigned("w1", 1, TASKS, True), 0.0)
    nothing_lost.handle(Restore(1, None), 0.1)
    assert nothing_lost.release(TASKS, 1) is None


def test_a_range_worker_at_a_resume_naming_another_owner_stays_idle_and_asks_nothing() -> None:
    w = WorkerProtocol("w2", now=0.0, cooperative=False)
    w.handle(Assigned("w2", 2, ("b",), True), 0.0)
    w.handle(Restore(1, None), 0.1)
    cmds = w.handle(Resume(1, dict.fromkeys(TASKS, "w1")), 0.2)
    assert cmds == [ResumeTasks(frozenset())]
