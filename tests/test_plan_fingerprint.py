"""Plan fingerprints: what differs is named; other plans are refused by the coordinator,
by workers (via Restore) and for checkpoint restores."""

from __future__ import annotations

from pathlib import Path

from kstream.api import Topology, Tumbling
from kstream.checkpointstorage.file import FileStore
from kstream.checkpointstorage.metadata import TaskSnapshot
from kstream.checkpointstorage.plans import plan_refusal, publish_plan
from kstream.config import CheckpointingConfig
from kstream.plan import plan_job
from kstream.plan.fingerprint import describe_difference, fingerprint
from kstream.protocol.commands import RefusePlan, Send, WriteMetadata
from kstream.protocol.coordinator import CheckpointCoordinator
from kstream.protocol.messages import (
    AcknowledgeCheckpoint,
    Heartbeat,
    Restore,
    Resume,
    TaskReady,
    TriggerCheckpoint,
)
from kstream.protocol.recovery import recover


def wordcount(size_ms: int = 60_000, fn_tag: str = "") -> Topology:
    t = Topology("wc")
    (
        t.source("lines", value_serde="str")
        .flat_map(lambda s: (s + fn_tag).split())
        .key_by(lambda w: w, key_serde="str")
        .window(Tumbling(size_ms))
        .count()
        .to("counts", value_serde="json")
    )
    return t


def test_the_fingerprint_names_what_differs_and_ignores_function_bodies() -> None:
    base = fingerprint(plan_job(wordcount(), "wc", {"lines": 3}))
    assert fingerprint(plan_job(wordcount(), "wc", {"lines": 3})) == base
    assert fingerprint(plan_job(wordcount(fn_tag="x"), "wc", {"lines": 3})).digest == base.digest
    window = fingerprint(plan_job(wordcount(size_ms=30_000), "wc", {"lines": 3}))
    assert window.digest != base.digest
    assert describe_difference(window.parts, base.parts) == "changed operator:stage1/window3"
    parts = fingerprint(plan_job(wordcount(), "wc", {"lines": 4}))
    assert (
        describe_difference(parts.parts, base.parts)
        == "changed sources, stage:stage0, stage:stage1"
    )


def _coordinator(plan: str) -> CheckpointCoordinator:
    return CheckpointCoordinator(
        frozenset({"a"}),
        CheckpointingConfig(interval=1.0),
        recovered=recover([], [], None),
        plan=plan,
    )


def test_the_coordinator_refuses_reports_of_another_plan_and_says_so_once() -> None:
    c = _coordinator("p1")
    assert c.start(0.0) == []
    assert c.tick(0.0) == [Send(Restore(1, None, "p1"))]  # Restore carries the plan
    assert c.handle(TaskReady(1, "a", "w2", 1, plan="p2"), 0.1) == [RefusePlan("p2", member="w2")]
    assert c.handle(TaskReady(1, "a", "w2", 1, plan="p2"), 0.2) == []  # said once
    assert c.handle(Heartbeat("w2", ("a",), 1, plan="p2"), 0.3) == []
    assert c.foreign_plan_reports == 3
    assert c.phase == "restoring"  # the foreign ready did not count
    assert c.handle(TaskReady(1, "a", "w1", 1, plan="p1"), 0.4) == [Send(Resume(1, {"a": "w1"}))]
    assert c.tick(1.5) == [Send(TriggerCheckpoint(1, 1, 1500))]
    cmds = c.handle(AcknowledgeCheckpoint(1, "a", 1, TaskSnapshot("h")), 1.6)
    assert len(cmds) == 1 and isinstance(cmds[0], WriteMetadata)
    assert cmds[0].metadata.plan == "p1"  # checkpoint metadata records the plan


def test_a_worker_refuses_a_restore_of_another_plan_saying_what_differs(tmp_path: Path) -> None:
    from kstream.protocol.worker import WorkerProtocol
    from kstream.protocol.workerevents import StopTasks

    store = FileStore(tmp_path)
    mine = fingerprint(plan_job(wordcount(), "app", {"lines": 1}))
    theirs = fingerprint(plan_job(wordcount(size_ms=30_000), "app", {"lines": 1}))
    publish_plan(store, "app", theirs)
    p = WorkerProtocol("w1", now=0.0, plan=mine.digest)
    assert p.handle(Restore(1, None, theirs.digest), 0.0) == [RefusePlan(theirs.digest, attempt=1)]
    assert p.attempt == 0  # not restored
    # The history's Restore may be an earlier deployment's (an upgrade): not refused;
    # the running coordinator's next Restore is what counts.
    w2 = WorkerProtocol("w2", now=0.0, plan=mine.digest)
    assert w2.learn([Restore(1, None, theirs.digest)]) == []
    assert w2.handle(Restore(2, None, theirs.digest), 0.0) == [RefusePlan(theirs.digest, attempt=2)]
    assert w2.handle(Restore(2, None, mine.digest), 0.0)[0] == StopTasks()
    assert plan_refusal(store, "app", mine, theirs.digest, 1) == (
        f"this worker runs plan {mine.digest}, the coordinator of 'app' plan {theirs.digest} "
        "(attempt 1): changed operator:stage1/window3. Every process of an app must run the "
        "same topology; deploy it everywhere or use a new app id"
    )
