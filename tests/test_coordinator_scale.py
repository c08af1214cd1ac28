"""The coordinator at scale (issue 41 item 4): thousands of tasks on hundreds of workers,
the real coordinator and worker protocols through the wire format
(``benchmarks.coordinator_sim``; its CPU figures are the benchmark's, not asserted here)."""

from __future__ import annotations

import gc
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner

import kstream.cli.coordinator as cli
from benchmarks.coordinator_sim import Sim, compacted, member_id, snapshot, task_ids
from kstream.config import CheckpointingConfig
from kstream.protocol.batching import ResumeParts, batch, resume_parts
from kstream.protocol.coordinator import CheckpointCoordinator
from kstream.protocol.messages import (
    MAX_MESSAGE_BYTES,
    AcknowledgeCheckpoint,
    AcknowledgeCheckpoints,
    CheckpointCompleted,
    Message,
    Restore,
    Resume,
    TaskFailed,
    TasksReady,
    decode,
    encode,
    record_key,
)
from kstream.protocol.recovery import recover
from kstream.protocol.worker import WorkerProtocol
from kstream.protocol.workerevents import Assigned, ResumeTasks
from kstream.query.routing import Directory
from kstream.worker.checkpointed import Checkpointed


def test_a_checkpoint_of_10000_tasks_on_100_workers_completes_with_one_ack_per_worker() -> None:
    sim = Sim(10_000, 100)
    sim.start()  # restore -> every TaskReady -> Resume (in parts: one is over the limit)
    for n in (1, 2):
        sim.ack_messages.clear()
        meta = sim.checkpoint()
        assert meta.checkpoint_id == n
        assert sorted(meta.tasks) == sorted(task_ids(10_000))
        owner = {t: m for m, tasks in sim.owned.items() for t in tasks}
        assert all(
            s == replace(snapshot(t, owner[t], n), ack_delay_ms=500.0)
            for t, s in meta.tasks.items()
        )
        assert dict(sim.ack_messages) == {m: 1 for m in sim.members}
    announced = [decode(w.value) for w in sim.topic if w.by_coordinator]
    assert [m for m in announced if isinstance(m, CheckpointCompleted)] == [
        CheckpointCompleted(1, 1),
        CheckpointCompleted(2, 1),
    ]
    assert max(len(w.value) for w in sim.topic) <= MAX_MESSAGE_BYTES


def test_a_starting_worker_reads_the_same_compacted_topic_after_more_checkpoints() -> None:
    """What compaction keeps does not grow with checkpoints, and of the acknowledgements it
    keeps one record per worker (a batch), not one per task."""
    sim = Sim(2_000, 20)
    sim.start()
    sizes = []
    for _ in range(6):
        sim.checkpoint()
        sim.heartbeats()
        sizes.append(len(compacted(sim.topic)))
    assert sizes[1:] == [sizes[1]] * 5
    kept = compacted(sim.topic)
    acks = [w for w in kept if w.key.startswith("AcknowledgeCheckpoints")]
    assert len(acks) == 20
    newest = [decode(w.value) for w in acks]
    assert {m.checkpoint_id for m in newest if isinstance(m, AcknowledgeCheckpoints)} == {6}
    # and what a starting worker learns from it is what the whole topic says
    whole, small = WorkerProtocol("w", now=0.0), WorkerProtocol("w", now=0.0)
    whole.learn(decode(w.value) for w in sim.topic)
    small.learn(decode(w.value) for w in kept)
    assert (small.attempt, small.restoring) == (whole.attempt, whole.restoring) == (1, False)


def test_what_a_starting_worker_reads_does_not_grow_with_the_tasks() -> None:
    """One record per worker of its readies and of its acknowledgements, whatever its
    number of tasks (before: one each per task, 2 x 100 000 records at 100 000 tasks)."""
    kept = []
    for tasks in (1_000, 2_000):
        sim = Sim(tasks, 20)
        sim.start()
        sim.checkpoint()
        kept.append(sorted(w.key.split(":")[0] for w in compacted(sim.topic)))
    assert kept[0] == kept[1]
    assert kept[0].count("TasksReady") == kept[0].count("AcknowledgeCheckpoints") == 20
    assert len(kept[0]) < 50


def test_one_batch_per_checkpoint_split_only_under_the_size_limit() -> None:
    m = member_id(7)
    acks = [
        AcknowledgeCheckpoint(n, t, 3, snapshot(t, m, n)) for n in (4, 5) for t in task_ids(3_000)
    ]
    out = batch(acks, m)
    assert [(p.checkpoint_id, p.attempt, p.member) for p in out][:1] == [(4, 3, m)]
    for n in (4, 5):
        parts = [p for p in out if p.checkpoint_id == n]
        assert 1 < len(parts) <= 8  # halves: each at least a quarter of the limit
        assert all(len(encode(p)) <= MAX_MESSAGE_BYTES for p in parts)
        merged: dict[str, Any] = {}
        for p in parts:
            merged.update(p.snapshots)
        assert merged == {a.task_id: a.snapshot for a in acks if a.checkpoint_id == n}
        assert len({record_key(p) for p in parts}) == len(parts)  # no part replaces another
    small = batch(acks[:3], m)
    assert small == [AcknowledgeCheckpoints(4, 3, m, {a.task_id: a.snapshot for a in acks[:3]})]
    assert decode(encode(small[0])) == small[0]


def test_the_coordinator_takes_a_batch_as_each_tasks_ack() -> None:
    c = CheckpointCoordinator(
        frozenset({"a", "b", "c"}),
        CheckpointingConfig(interval=1.0, timeout=60.0),
        recovered=recover([Resume(0, {})], [], None),  # running in attempt 0
    )
    c.start(0.0)
    assert c.tick(1.0)  # triggers checkpoint 1
    snap = snapshot("stage0-1", "w1", 1)
    stale = AcknowledgeCheckpoints(1, 7, "w1", {"a": snap, "b": snap})  # another attempt
    assert c.handle(stale, 1.1) == [] and c.pending[1].acks == {}
    first = AcknowledgeCheckpoints(1, 0, "w1", {"a": snap, "b": snap, "x": snap})
    assert c.handle(first, 1.2) == []
    assert sorted(c.pending[1].acks) == ["a", "b"]  # "x": not in the plan, ignored
    assert c.pending[1].acks["a"].ack_delay_ms == 200.0
    cmds = c.handle(AcknowledgeCheckpoint(1, "c", 0, snap), 1.3)  # one task's, as before
    assert [type(cmd).__name__ for cmd in cmds] == ["WriteMetadata"]
    assert sorted(cmds[0].metadata.tasks) == ["a", "b", "c"]  # type: ignore[union-attr]


def test_a_resume_over_the_limit_goes_in_parts_that_every_reader_puts_together() -> None:
    members = [member_id(i) for i in range(100)]
    owners = {t: members[i % 100] for i, t in enumerate(task_ids(20_000))}
    parts = resume_parts(4, owners)
    assert len(parts) > 1 and all(len(encode(p)) <= MAX_MESSAGE_BYTES for p in parts)
    assert [(p.attempt, p.part, p.parts) for p in parts] == [
        (4, k, len(parts)) for k in range(len(parts))
    ]
    assert len({record_key(p) for p in parts}) == len(parts)
    wire: list[Message] = [decode(encode(p)) for p in parts]
    # the worker resumes on the last part, with the tasks it owns
    w = WorkerProtocol(members[3], now=0.0)
    w.attempt, w.restoring, w.tasks = 4, True, {"stage0-3", "stage0-103", "stage1-7"}
    actions = [w.handle(m, 1.0) for m in wire]
    assert actions[:-1] == [[]] * (len(parts) - 1)
    assert actions[-1] == [ResumeTasks(frozenset({"stage0-3", "stage0-103"}))]
    # the coordinator's recovery, the query directory and a starting worker see it whole
    assert recover(wire, [], None).owners == owners
    d = Directory()
    d.learn(wire)
    assert (d.attempt, d.restoring, d.owners) == (4, False, owners)
    late = WorkerProtocol("late", now=0.0)
    late.learn([*wire[:1], Resume(3, {}), *wire])  # (a stale part first: ignored)
    assert (late.attempt, late.restoring) == (0, False)
    assert ResumeParts().add(parts[0]) is None


def test_a_resume_of_a_small_job_is_one_message_as_before_parts() -> None:
    msg = resume_parts(2, {"stage0-0": "w1"})
    assert msg == [Resume(2, {"stage0-0": "w1"})]
    old = b'{"v":1,"type":"Resume","attempt":2,"owners":{"stage0-0":"w1"}}'
    assert encode(msg[0]) == old  # readers of an older version decode it
    assert decode(old) == msg[0] and record_key(msg[0]) == "Resume"


@pytest.mark.parametrize("uploading", [True, False])
def test_a_worker_holds_acks_while_another_upload_of_their_checkpoint_is_in_flight(
    uploading: bool,
) -> None:
    mode = object.__new__(Checkpointed)
    mode._held = []
    in_flight = [SimpleNamespace(checkpoint_id=5)] if uploading else []
    mode.tasks = SimpleNamespace(  # type: ignore[assignment]
        runners={"a": SimpleNamespace(uploads=[]), "b": SimpleNamespace(uploads=in_flight)}
    )
    ack = AcknowledgeCheckpoint(5, "a", 1, snapshot("stage0-1", "w", 5))
    sent = mode._batched([ack], "w")
    if uploading:
        assert sent == [] and mode._held == [ack]
        mode.tasks.runners["b"].uploads = []  # its upload finished (declined, say)
        sent = mode._batched([], "w")
    assert sent == [AcknowledgeCheckpoints(5, 1, "w", {"a": ack.snapshot})]
    assert mode._held == []


def test_a_worker_reports_ready_only_the_tasks_it_restored() -> None:
    """A task whose restore could not reach the store is left out of the worker's
    ``TasksReady`` and reported failed instead (the coordinator restores again)."""
    reported: list[Message] = []
    mode = object.__new__(Checkpointed)
    mode.protocol = WorkerProtocol("w1", now=0.0)
    mode.protocol.handle(Assigned("w1", 3, ("a", "b", "c"), True), 0.0)
    mode.control = SimpleNamespace(report=reported.append)  # type: ignore[assignment]
    mode._committer = SimpleNamespace(busy=False)  # type: ignore[assignment]
    mode.stats = SimpleNamespace(restores=0)  # type: ignore[assignment]
    mode.tasks = SimpleNamespace(  # type: ignore[assignment]
        restore=lambda attempt, n: ({}, {"b": "store unreachable"})
    )
    assert mode._handle(Restore(1, 4), 1.0) is None
    assert reported == [
        TasksReady(1, ("a", "c"), "w1", 3),
        TaskFailed("b", "w1", 1, "store unreachable"),
    ]


def test_kstream_coordinator_tunes_its_gc_as_a_worker_does(monkeypatch: Any) -> None:
    """The standalone coordinator applies the workers' GC settings (before: the default
    thresholds, ~0.3 s more CPU per checkpoint at 100 000 tasks)."""
    seen: list[tuple[int, int, int]] = []

    def coordinate(*_a: Any, **_k: Any) -> int:
        seen.append(gc.get_threshold())
        return 0

    monkeypatch.setattr(cli, "coordinate", coordinate)
    monkeypatch.setattr(cli, "prepare_tasks", lambda *_a: SimpleNamespace(app_id="app"))
    monkeypatch.setattr(cli, "start_observability", lambda *_a: None)
    monkeypatch.setattr(
        cli, "install_signal_handlers", lambda: SimpleNamespace(attach=lambda _f: None)
    )
    before = gc.get_threshold()
    try:
        result = CliRunner().invoke(cli.coordinator, ["--tasks", "a,b"])
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
    assert result.exit_code == 0, result.output
    assert seen == [(100_000, 50, 50)]


def _checkpoint_cpu(tasks: int, workers: int, *, batched: bool = True) -> float:
    """The least coordinator CPU of three checkpoints of ``tasks`` on ``workers`` (the
    cyclic GC off while they run: its pauses depend on the whole test process's heap)."""
    sim = Sim(tasks, workers, batched=batched)
    sim.start()
    cpu = []
    gc.disable()
    try:
        for _ in range(3):
            sim.cpu = 0.0
            sim.checkpoint()
            cpu.append(sim.cpu)
    finally:
        gc.enable()
    return min(cpu)


@pytest.mark.parametrize("batched", [True, False], ids=["batched", "per-task-acks"])
def test_a_checkpoints_coordinator_cpu_grows_linearly_with_the_tasks(batched: bool) -> None:
    """16x the tasks and workers costs the coordinator at most 4 x 16x the CPU per
    checkpoint: linear measures 8-11x (its fixed costs), a cost per message that grows
    with the tasks — `is_complete` sorting the missing tasks, as before — 350x with
    per-task acks (17x batched: a message per worker). A ratio, generous against a shared
    machine's noise, not a time."""
    small = _checkpoint_cpu(500, 5, batched=batched)
    large = _checkpoint_cpu(8_000, 80, batched=batched)
    assert large / small < 4 * 16, (small, large)
