"""A worker restoring many tasks keeps sending heartbeats (no broker: the tasks' builds
are fakes that wait until the worker's heartbeat went out), and so does one triggering
many tasks. A worker holding ~512 tasks
at 1024 partitions took a minute to restore them on its processing thread, six times
the coordinator's heartbeat timeout (benchmarks/SCALING.md)."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from kstream.api import Topology
from kstream.config import Guarantee
from kstream.plan import plan_job
from kstream.protocol.messages import Heartbeat, Message
from kstream.protocol.worker import WorkerProtocol
from kstream.protocol.workerevents import TriggerTasks
from kstream.worker import tasks as tasks_module
from kstream.worker.checkpointed import Checkpointed
from kstream.worker.settings import WorkerStats
from kstream.worker.tasks import WorkerTasks

WAIT_S = 5.0  # how long a fake build waits for a heartbeat before it gives up


class _Source:
    def __init__(self, assignment: set[tuple[str, int]]) -> None:
        self.assignment = assignment
        self.generation = 1
        self.member_id = "w-1"

    def pause(self, tps: set[tuple[str, int]]) -> None:
        pass

    def seek(self, tp: tuple[str, int], offset: int) -> None:
        pass


class _Control:
    """Keeps what the worker posts; ``heartbeat`` is set by the first heartbeat."""

    def __init__(self) -> None:
        self.posted: list[Message] = []
        self.heartbeat = threading.Event()
        self.progress = threading.Event()  # a heartbeat said a task was restored

    def post_all(self, msgs: list[Message]) -> None:
        self.posted += msgs
        if any(isinstance(m, Heartbeat) for m in msgs):
            self.heartbeat.set()
        if any(isinstance(m, Heartbeat) and m.restored for m in msgs):
            self.progress.set()

    def report(self, msg: Message) -> bool:
        self.post_all([msg])
        return True


class _Runner:
    sinks: dict[str, Any] = {}

    def __init__(self) -> None:
        self.task = self

    def seek_positions(self) -> dict[tuple[str, int], int | None]:
        return {}

    def close(self) -> None:
        pass


def _restoring_worker(plan: Any, control: _Control) -> tuple[WorkerTasks, Checkpointed]:
    """The tasks and mode of worker "w" holding all 12 partitions of ``plan``'s input
    (the builds are the test's fakes), about to restore them in generation 1."""
    ctx = SimpleNamespace(
        config=SimpleNamespace(app_id="a"),
        store=None,
        clock=time.monotonic,
        transactions=object(),
        sink_guarantee=Guarantee.AT_LEAST_ONCE,
    )
    source = _Source({("in", p) for p in range(12)})
    tasks = WorkerTasks(plan, source, ctx)  # type: ignore[arg-type]
    protocol = WorkerProtocol("w", now=time.monotonic(), heartbeat_interval=0.05)
    protocol.generation = 1
    protocol.tasks = {s.task_id for s in plan.tasks}  # what a Restore of them sets
    mode = Checkpointed(protocol, control, tasks, source, None, WorkerStats(), "w")  # type: ignore[arg-type]
    return tasks, mode


def test_a_long_restore_sends_heartbeats_while_the_tasks_build(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    t = Topology("a")
    t.source("in", keyed=True).to("out")
    plan = plan_job(t, "a", {"in": 12})
    control = _Control()

    def build(ctx: Any, spec: Any, attempt: int, handle: str | None, *_: Any) -> _Runner:
        # Every build takes until the worker's heartbeat went out: the restore as a
        # whole lasts longer than a heartbeat interval, as with hundreds of tasks.
        if not control.heartbeat.wait(WAIT_S):
            raise RuntimeError("no heartbeat while the tasks restored")
        return _Runner()

    monkeypatch.setattr(tasks_module, "open_runner", build)
    monkeypatch.setattr(tasks_module, "task_manifests", lambda *a: {})
    tasks, mode = _restoring_worker(plan, control)

    ok, failed = mode._restore(1, None, time.monotonic())

    assert (ok, failed) == (True, {})
    assert sorted(tasks.runners) == sorted(s.task_id for s in plan.tasks)
    beats = [m for m in control.posted if isinstance(m, Heartbeat)]
    assert beats  # (kstream.worker.keepalive, every interval while the restore waits)
    assert beats[0].tasks == tuple(sorted(s.task_id for s in plan.tasks))
    assert (beats[0].member, beats[0].generation) == ("w", 1)


def test_a_restores_heartbeats_say_how_many_tasks_it_restored_so_far(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The coordinator's restore deadline runs from the restore's last progress: a
    worker restoring 512 tasks took minutes, past the fixed deadline, and every worker
    restored again, for good (benchmarks/SCALING.md)."""
    t = Topology("a")
    t.source("in", keyed=True).to("out")
    plan = plan_job(t, "a", {"in": 12})
    first = plan.tasks[0].task_id
    control = _Control()

    def build(ctx: Any, spec: Any, attempt: int, handle: str | None, *_: Any) -> _Runner:
        # One task builds at once; the others only after a heartbeat said so.
        if spec.task_id != first and not control.progress.wait(WAIT_S):
            raise RuntimeError("no heartbeat with the restore's progress")
        return _Runner()

    reads: list[int | None] = []  # the checkpoint's metadata: read once for all tasks

    def manifests(store: Any, app_id: str, checkpoint_id: int | None) -> dict[str, str]:
        reads.append(checkpoint_id)
        return {}

    monkeypatch.setattr(tasks_module, "open_runner", build)
    monkeypatch.setattr(tasks_module, "task_manifests", manifests)
    tasks, mode = _restoring_worker(plan, control)

    ok, failed = mode._restore(1, None, time.monotonic())

    assert (ok, failed) == (True, {})
    assert tasks.restored == 12
    assert reads == [None]  # once, not once per task (44 % of a 512-task restore)
    counts = [m.restored for m in control.posted if isinstance(m, Heartbeat)]
    assert counts and counts == sorted(counts) and 1 <= counts[-1] <= 12


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class _Triggered:
    """A running task whose trigger takes ``took`` s of the fake clock (its barriers)."""

    running = True
    holding = False

    def __init__(self, task_id: str, clock: _Clock, took: float) -> None:
        self.task_id, self.attempt, self.spec = task_id, 1, SimpleNamespace(outputs=())
        self.clock, self.took = clock, took
        self.triggered: list[int] = []

    def step(self, call: Any, *args: Any) -> None:
        call(*args)

    def trigger(self, checkpoint_id: int, attempt: int, now: float, hold: bool = False) -> None:
        self.triggered.append(checkpoint_id)
        self.clock.now += self.took


def test_triggering_many_tasks_sends_heartbeats_between_them() -> None:
    # Each trigger writes the task's barriers to every downstream partition: at 1024
    # partitions a worker's 256 upstream tasks took ~50 s, and the coordinator declared
    # the worker lost (no heartbeat for 10 s) before it had acknowledged anything.
    clock = _Clock()
    t = Topology("a")
    t.source("in", keyed=True).to("out")
    plan = plan_job(t, "a", {"in": 1})
    written: list[list[list[int]]] = []  # the tasks' triggers when the barriers went out
    runners = [_Triggered(f"s-{i}", clock, took=0.5) for i in range(10)]
    router = SimpleNamespace(write_sets=lambda: written.append([r.triggered for r in runners]))
    ctx = SimpleNamespace(
        config=SimpleNamespace(app_id="a"),
        store=None,
        clock=clock,
        transactions=object(),
        router=router,
    )
    source = _Source(set())
    tasks = WorkerTasks(plan, source, ctx)  # type: ignore[arg-type]
    tasks.runners = {r.task_id: r for r in runners}  # type: ignore[misc]
    protocol = WorkerProtocol("w", now=clock.now, heartbeat_interval=1.0)
    protocol.generation, protocol.attempt = 1, 1
    protocol.tasks = protocol.running = {r.task_id for r in runners}
    control = _Control()
    mode = Checkpointed(protocol, control, tasks, source, None, WorkerStats(), "w")  # type: ignore[arg-type]

    mode._apply([TriggerTasks(7, 1)], clock.now)

    assert [r.triggered for r in runners] == [[7]] * 10
    assert written == [[[7]] * 10]  # the barriers went out once, after every trigger
    beats = [m for m in control.posted if isinstance(m, Heartbeat)]
    # 5 s of triggers: a heartbeat as soon as one is due (the first at once), one a second
    assert len(beats) == 5
