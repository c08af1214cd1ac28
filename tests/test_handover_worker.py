"""A task holding after a hand-over checkpoint, on the worker's side (docs/design.md §6.6):
the runner keeps the task's snapshot point unreleased, the worker holds the task's
inputs in its backlog, pauses them and neither ticks nor triggers the task; a release
replays what waited."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from kstream.api import Topology
from kstream.config import Guarantee
from kstream.elements.records import SnapshotPoint
from kstream.kafka.exactly_once_sink import ExactlyOnceSink
from kstream.plan import plan_job
from kstream.worker.runner import TaskRunner
from kstream.worker.tasks import WorkerTasks

TP = tuple[str, int]


class _Task:
    """Drains what the test queued; counts the releases of its snapshot point."""

    def __init__(self) -> None:
        self.out: list[Any] = []
        self.released = 0
        self.triggered: int | None = None

    def drain(self) -> list[Any]:
        out, self.out = self.out, []
        return out

    def snapshot_taken(self) -> None:
        self.released += 1
        self.out = ["after the barrier"]

    def trigger_checkpoint(self, checkpoint_id: int, attempt: int, now: float) -> None:
        self.out = ["before", SnapshotPoint("t", checkpoint_id, attempt, {}), "in the same call"]
        self.triggered = checkpoint_id

    def feed_barrier(self, checkpoint_id: int) -> None:
        """The last upstream barrier of ``checkpoint_id`` came in (internal channels)."""
        self.out = [SnapshotPoint("t", checkpoint_id, 1, {})]


class _Router:
    def __init__(self) -> None:
        self.routed: list[Any] = []

    def route(self, _route: Any, out: list[Any]) -> None:
        self.routed += out


def _runner() -> tuple[TaskRunner, _Task, _Router, list[int | None]]:
    """A runner around a fake task; its snapshots are recorded, not taken."""
    runner = object.__new__(TaskRunner)
    task, router = _Task(), _Router()
    snapshots: list[int | None] = []
    runner.task = task  # type: ignore[assignment]
    runner.ctx = type("Ctx", (), {"router": router})()
    runner.route = None  # type: ignore[assignment]
    runner.hold_at, runner.holding, runner._triggered = None, False, {}
    runner._snapshot = lambda point: snapshots.append(point.checkpoint_id)  # type: ignore[method-assign]
    return runner, task, router, snapshots


def test_a_hold_trigger_keeps_the_snapshot_point_until_released() -> None:
    runner, task, router, snapshots = _runner()
    runner.trigger(7, 1, 0.0, hold=True)
    assert snapshots == [7]
    assert runner.holding and task.released == 0  # what follows the barrier waits
    assert router.routed == ["before", "in the same call"]
    assert runner.release() is True
    assert (runner.holding, runner.hold_at) == (False, None)
    runner.step(task.snapshot_taken)  # the worker replays what waited (ReleaseTasks)
    assert task.released == 1
    assert router.routed[-1] == "after the barrier"
    assert runner.release() is False  # nothing held any more


def test_a_normal_trigger_releases_the_snapshot_point_at_once() -> None:
    runner, task, router, snapshots = _runner()
    runner.trigger(7, 1, 0.0)
    assert snapshots == [7]
    assert not runner.holding and task.released == 1
    assert router.routed == ["before", "in the same call", "after the barrier"]


def test_only_the_hold_checkpoints_point_holds() -> None:
    runner, task, _router, snapshots = _runner()
    runner.hold_at = 8  # told to hold at 8; its snapshot point of 7 comes first
    runner.trigger(7, 1, 0.0)
    assert snapshots == [7] and not runner.holding and task.released == 1


def test_a_barrier_before_its_trigger_holds_until_the_trigger_says() -> None:
    """A downstream task's barrier may come through the repartition topic before its
    worker read the trigger: whether it holds is not known yet, so it holds until then."""
    for hold in (False, True):
        runner, task, router, snapshots = _runner()
        task.triggered = None
        runner.step(task.feed_barrier, 7)
        assert snapshots == [7] and runner.holding and task.released == 0
        runner.trigger(7, 1, 0.0, hold=hold)
        assert task.triggered is None  # (no sources of its own: nothing injected)
        assert runner.holding is hold
        assert task.released == (0 if hold else 1)
        assert router.routed == ([] if hold else ["after the barrier"])


def test_a_trigger_after_a_hold_whose_trigger_never_came_releases_it_first() -> None:
    runner, task, _router, snapshots = _runner()
    runner.step(task.feed_barrier, 7)
    runner.trigger(8, 1, 0.0)
    assert task.released == 2 and snapshots == [7, 8] and not runner.holding


def test_only_a_task_held_at_the_restored_checkpoint_with_nothing_after_it_carries_on() -> None:
    """A restore of checkpoint 7 keeps a task that holds right after its snapshot of 7
    as it is (no download, no reopen); not one held at another checkpoint, nor one whose
    exactly-once sink has output after the snapshot point (it would be emitted again)."""
    runner, _task, _router, _snapshots = _runner()
    runner.sinks = {}
    runner.trigger(7, 1, 0.0, hold=True)
    assert runner.holds(7) and not runner.holds(8) and not runner.holds(None)
    sink = object.__new__(ExactlyOnceSink)
    sink.buffer = SimpleNamespace(open=SimpleNamespace(size=1))  # type: ignore[assignment]
    runner.sinks = {Guarantee.EXACTLY_ONCE: sink}
    assert not runner.holds(7)
    sink.buffer = SimpleNamespace(open=SimpleNamespace(size=0))  # type: ignore[assignment]
    assert runner.holds(7)
    runner.release()
    assert not runner.holds(7)


class _Source:
    def __init__(self, assignment: set[TP]) -> None:
        self.assignment = assignment
        self.paused: frozenset[TP] = frozenset()
        self.pauses: list[set[TP]] = []

    def pause(self, tps: set[TP]) -> None:
        self.pauses.append(set(tps))
        self.paused = self.paused | tps

    def resume(self, tps: set[TP]) -> None:
        self.paused = self.paused - tps

    def lag(self, tps: Any = None) -> dict[TP, int]:
        return {}


class _Held:
    """A running task of the worker (what WorkerTasks asks of a runner)."""

    running = True
    metrics: dict[str, int] = {}

    def __init__(self, inputs: set[TP], holding: bool) -> None:
        self.task = self
        self._inputs = inputs
        self.holding = holding
        self.closed = False

    def close(self) -> None:
        self.closed = True

    def late_counts(self) -> dict[str, tuple[int, int]]:
        return {}

    def inputs(self) -> set[TP]:
        return self._inputs

    def paused_inputs(self) -> frozenset[TP]:
        return frozenset()

    def source_watermarks(self) -> dict[TP, tuple[int, bool]]:
        return {tp: (1000, False) for tp in self._inputs}


def _tasks(holding: bool) -> tuple[WorkerTasks, _Source, _Held, _Held]:
    t = Topology("a")
    t.source("in", keyed=True).to("out")
    source = _Source({("in", 0), ("in", 1)})
    tasks = WorkerTasks(plan_job(t, "a", {"in": 2}), source, None)  # type: ignore[arg-type]
    r0, r1 = _Held({("in", 0)}, holding), _Held({("in", 1)}, False)
    tasks.runners = {"stage0-0": r0, "stage0-1": r1}  # type: ignore[dict-item]
    return tasks, source, r0, r1


def test_the_worker_holds_pauses_and_skips_a_holding_task() -> None:
    tasks, source, r0, r1 = _tasks(holding=True)
    assert tasks.held(set()) == {("in", 0)}  # its records wait in the backlog
    assert tasks.running() == [r1]  # neither ticked nor triggered
    tasks.sync_pauses()
    assert source.paused == {("in", 0)}
    r0.holding = False  # released
    assert tasks.held(set()) == frozenset()
    assert tasks.running() == [r0, r1]
    tasks.sync_pauses()
    assert source.paused == frozenset()


def test_a_task_that_starts_holding_in_a_slice_is_held_by_the_next_recheck() -> None:
    tasks, _source, r0, _r1 = _tasks(holding=False)
    assert tasks.held(set()) == frozenset()
    r0.holding = True  # its hold checkpoint's snapshot point came up in the slice fed
    assert tasks.held(set(), ("in", 1)) == frozenset()  # another task's slice: not read
    assert tasks.held(set(), ("in", 0)) == {("in", 0)}  # its own: held from now on


def test_a_group_change_keeps_the_holding_tasks_for_the_restore() -> None:
    """An eager rebalance revokes everything first and assigns in a later poll: the
    holding tasks are kept whatever the assignment says at that moment (the restore
    that follows carries on those still assigned and stops the rest)."""
    tasks, source, r0, r1 = _tasks(holding=True)
    tasks.ctx = SimpleNamespace(metrics=SimpleNamespace(task_closed=lambda *a: None))  # type: ignore[assignment]
    source.assignment = set()  # revoked, not assigned yet
    tasks.stop_all(keep_held=True)
    assert tasks.runners == {"stage0-0": r0} and not r0.closed and r1.closed
    tasks.stop_all()  # no hand-over: every task stops
    assert tasks.runners == {} and r0.closed
