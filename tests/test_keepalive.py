"""A worker is not lost while its processing thread waits on the cluster: a restore
(stable offsets, markers, downloads) or a publication still committing goes on with
heartbeats from another thread (kstream.worker.keepalive). Without them, a wait longer
than the coordinator's heartbeat timeout (a broker restarting under the group or
transaction coordinator) made the worker "lost" and the job fail over again."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any, cast

import pytest

from kstream.protocol.messages import Heartbeat, Message
from kstream.protocol.worker import WorkerProtocol
from kstream.worker.checkpointed import Checkpointed
from kstream.worker.keepalive import heartbeating

INTERVAL = 0.02
HB = Heartbeat("w1", ("0_0",), 4)


class Control:
    """What the mode uses of the control client here: ``post_all``."""

    def __init__(self) -> None:
        self.sent: list[Message] = []
        self.more = threading.Condition()

    def post_all(self, msgs: list[Message]) -> None:
        with self.more:
            self.sent += msgs
            self.more.notify_all()

    def wait_for(self, n: int, deadline_s: float = 10.0) -> bool:
        """Whether ``n`` messages were posted before the deadline."""
        with self.more:
            return self.more.wait_for(lambda: len(self.sent) >= n, deadline_s)


def test_the_heartbeat_goes_out_every_interval_while_the_body_waits_and_stops_after() -> None:
    control = Control()
    with heartbeating(HB, lambda hb: control.post_all([hb]), INTERVAL):
        assert control.wait_for(3)  # the body waits: three intervals pass
    # The sending thread has ended (joined on exit): nothing more can come.
    assert "kstream-keepalive" not in {t.name for t in threading.enumerate()}
    assert set(control.sent) == {HB}


def test_no_generation_no_heartbeat_no_thread() -> None:
    before = threading.active_count()
    with heartbeating(None, lambda hb: pytest.fail("sent"), INTERVAL):
        assert threading.active_count() == before


def mode(control: Control, tasks: Any) -> Checkpointed:
    protocol = WorkerProtocol("w1", now=0.0, heartbeat_interval=INTERVAL)
    protocol.generation, protocol.tasks = 7, {"0_0", "1_0"}
    tasks.ctx = SimpleNamespace(config=SimpleNamespace(app_id="app"), transactions=object())
    tasks.aligner = SimpleNamespace(max_drift_ms={})
    stats = SimpleNamespace(restores=0)
    return Checkpointed(protocol, cast(Any, control), tasks, cast(Any, None), cast(Any, None),
                        cast(Any, stats), "w1")  # fmt: skip


def test_a_restore_waiting_on_the_cluster_keeps_the_worker_heard() -> None:
    control = Control()

    class Tasks:
        restored = 0  # none built yet: heartbeats as before restore progress

        def restore(self, attempt: int, checkpoint_id: int | None) -> tuple[dict, dict]:
            # The restore waits (an open transaction of the previous owner, say) for
            # as long as three heartbeat intervals; the old code sent none meanwhile.
            assert control.wait_for(3), "no heartbeat while the restore waited"
            return {}, {}

    m = mode(control, Tasks())
    assert m._restore(2, 5, now=0.0) == (True, {})
    assert control.sent[0] == Heartbeat("w1", ("0_0", "1_0"), 7)


def test_waiting_for_a_publication_still_committing_keeps_the_worker_heard() -> None:
    control = Control()

    class Committer:
        busy = True

        def collect(self, *, wait: bool) -> dict:
            assert wait and control.wait_for(3), "no heartbeat while the commit was awaited"
            return {}

    m = mode(control, SimpleNamespace())
    m._committer = cast(Any, Committer())
    m._collect_commits(0.0, wait=True)
    assert {type(x) for x in control.sent} == {Heartbeat}
