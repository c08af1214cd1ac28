"""A worker acknowledges a checkpoint in one message once every upload of it here has
finished, after waiting for the internal records written before its barriers (no
broker: the runners' uploads are futures the test finishes, the router counts the
waits). The wait ran at every loop iteration that saw one more of 512 uploads finish:
6 s of a 1024-partition worker's processing thread in 120 s (benchmarks/SCALING.md)."""

from __future__ import annotations

import time
from concurrent.futures import Future
from types import SimpleNamespace

from kstream.api import Topology
from kstream.config import Guarantee
from kstream.plan import plan_job
from kstream.protocol.messages import AcknowledgeCheckpoints, DeclineCheckpoint, Message
from kstream.protocol.worker import WorkerProtocol
from kstream.snapshots.upload import StateHandle
from kstream.worker.checkpointed import Checkpointed
from kstream.worker.runner import PendingUpload, TaskRunner
from kstream.worker.settings import WorkerStats
from kstream.worker.tasks import WorkerTasks

N = 8  # tasks of the worker


class _Control:
    def __init__(self) -> None:
        self.posted: list[Message] = []

    def post_all(self, msgs: list[Message]) -> None:
        self.posted += msgs


class _Router:
    def __init__(self) -> None:
        self.waits = 0

    def internal_delivered(self, attempt: int) -> bool:
        self.waits += 1
        return True


def _handle(n: int) -> StateHandle:
    return StateHandle(f"m-{n}", n, f"chk-{n}", 10, 10, 1, 1, 1.0, 2.0)


def _worker() -> tuple[Checkpointed, _Control, _Router, list[TaskRunner]]:
    t = Topology("a")
    t.source("in", keyed=True).to("out")
    plan = plan_job(t, "a", {"in": N})
    router = _Router()
    ctx = SimpleNamespace(
        config=SimpleNamespace(app_id="a"),
        clock=time.monotonic,
        transactions=object(),
        sink_guarantee=Guarantee.AT_LEAST_ONCE,
        router=router,
        metrics=SimpleNamespace(snapshot_acked=lambda task, size: None),
    )
    source = SimpleNamespace(assignment=set(), generation=1, member_id="w-1")
    tasks = WorkerTasks(plan, source, ctx)  # type: ignore[arg-type]
    runners = []
    for spec in plan.tasks:
        r = TaskRunner.__new__(TaskRunner)  # only what acknowledging reads
        r.spec, r.ctx, r.uploads, r.running = spec, ctx, [], True  # type: ignore[assignment]
        r.attempt = 0
        tasks.runners[spec.task_id] = r
        runners.append(r)
    protocol = WorkerProtocol("w", now=time.monotonic(), heartbeat_interval=60.0)
    control = _Control()
    mode = Checkpointed(protocol, control, tasks, source, None, WorkerStats(), "w")  # type: ignore[arg-type]
    return mode, control, router, runners


def _upload(r: TaskRunner, n: int) -> Future[StateHandle]:
    f: Future[StateHandle] = Future()
    r.uploads.append(PendingUpload(n, 0, f, 1.0, {}))
    return f


def _acks(control: _Control) -> list[tuple[int, list[str]]]:
    return [
        (m.checkpoint_id, sorted(m.snapshots))
        for m in control.posted
        if isinstance(m, AcknowledgeCheckpoints)
    ]


def test_a_checkpoint_is_acknowledged_once_after_one_wait_for_deliveries() -> None:
    mode, control, router, runners = _worker()
    futures = [_upload(r, 3) for r in runners]
    for f in futures[:-1]:  # uploads finish one loop iteration after another
        f.set_result(_handle(3))
        mode.end(time.monotonic())
    assert (router.waits, _acks(control)) == (0, [])  # one upload of 3 still runs
    futures[-1].set_result(_handle(3))
    mode.end(time.monotonic())
    assert router.waits == 1
    assert _acks(control) == [(3, sorted(r.task_id for r in runners))]
    mode.end(time.monotonic())
    assert router.waits == 1  # nothing left to acknowledge


def test_a_finished_checkpoint_goes_out_while_the_next_one_uploads() -> None:
    mode, control, router, runners = _worker()
    first = [_upload(r, 3) for r in runners]
    second = [_upload(r, 4) for r in runners]
    for f in first:
        f.set_result(_handle(3))
    second[0].set_result(_handle(4))
    mode.end(time.monotonic())
    assert _acks(control) == [(3, sorted(r.task_id for r in runners))]
    for f in second[1:]:
        f.set_result(_handle(4))
    mode.end(time.monotonic())
    assert [n for n, _ in _acks(control)] == [3, 4] and router.waits == 2
    assert _acks(control)[1][1] == sorted(r.task_id for r in runners)


def test_a_failed_upload_is_declined_at_once() -> None:
    mode, control, router, runners = _worker()
    futures = [_upload(r, 5) for r in runners]
    futures[0].set_exception(OSError("store down"))
    mode.end(time.monotonic())
    declines = [m for m in control.posted if isinstance(m, DeclineCheckpoint)]
    assert [(d.checkpoint_id, d.task_id) for d in declines] == [(5, runners[0].task_id)]
    assert "store down" in declines[0].reason
    assert _acks(control) == [] and router.waits == 1
