"""A publication that failed or was fenced just before a restore stops no task: the
restore rebuilds every assigned task from the checkpoint (whose markers say what is
out), and the coordinator's Resume runs them all. Before, the failure's TaskStopped
took the task out of what the protocol had just restored, its Resume left the task
stopped, and the coordinator failed the job over once more when it noticed."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from kstream.kafka.sink import SinkError, SinkFencedError
from kstream.protocol.messages import Message, Restore, Resume, TasksReady
from kstream.protocol.worker import WorkerProtocol
from kstream.worker.checkpointed import Checkpointed


class Control:
    def __init__(self) -> None:
        self.sent: list[Message] = []

    def post_all(self, msgs: list[Message]) -> None:
        self.sent += msgs

    def report(self, msg: Message) -> bool:
        self.sent.append(msg)
        return True


class Committer:
    """A publication in flight whose outcome is ``outcome`` for task 1_0."""

    def __init__(self, outcome: SinkError) -> None:
        self.busy, self.outcome = True, outcome

    def collect(self, *, wait: bool) -> dict[str, SinkError]:
        self.busy = False
        return {"1_0": self.outcome}


class Tasks:
    def __init__(self) -> None:
        self.runners = {"0_0": SimpleNamespace(attempt=1), "1_0": SimpleNamespace(attempt=1)}
        self.restored: list[int] = []
        self.resumed: frozenset[str] | None = None
        self.ctx = SimpleNamespace(
            config=SimpleNamespace(app_id="app"), transactions=object(), clock=lambda: 0.0
        )
        self.aligner = SimpleNamespace(max_drift_ms={})

    def remove(self, task_id: str) -> None:
        self.runners.pop(task_id, None)

    def restore(self, attempt: int, checkpoint_id: int | None) -> tuple[dict, dict]:
        self.restored.append(attempt)
        self.runners = {t: SimpleNamespace(attempt=attempt) for t in ("0_0", "1_0")}
        return {}, {}

    def resume(self, attempt: int, owned: frozenset[str], *, draining: bool) -> None:
        self.resumed = owned


@pytest.mark.parametrize(
    "outcome",
    [SinkFencedError("UNKNOWN_MEMBER_ID"), SinkError("the broker aborted it")],
    ids=["fenced", "failed"],
)
def test_the_restore_that_follows_a_failed_publication_runs_every_task(
    outcome: SinkError,
) -> None:
    control, tasks = Control(), Tasks()
    protocol = WorkerProtocol("w1", now=0.0)
    protocol.generation, protocol.attempt = 7, 1
    protocol.assigned, protocol.any_partitions = ("0_0", "1_0"), True
    protocol.tasks = protocol.running = {"0_0", "1_0"}
    m = Checkpointed(protocol, cast(Any, control), cast(Any, tasks), cast(Any, None),
                     cast(Any, None), cast(Any, SimpleNamespace(restores=0)), "w1")  # fmt: skip
    m._committer = cast(Any, Committer(outcome))
    m._handle(Restore(2, 5), 0.0)  # the publication's outcome is collected first
    assert tasks.restored == [2]
    ready = [x for x in control.sent if isinstance(x, TasksReady)]
    assert [sorted(r.tasks) for r in ready] == [["0_0", "1_0"]]
    m._handle(Resume(2, {"0_0": "w1", "1_0": "w1"}), 0.1)
    assert tasks.resumed == frozenset({"0_0", "1_0"})
    assert not any(type(x).__name__ == "TaskFailed" for x in control.sent)
