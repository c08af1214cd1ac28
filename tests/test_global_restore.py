"""One global checkpoint on restore: a task that cannot restore reports why, and every
task restores the next older retained checkpoint — never a mix (issue 13 point 5)."""

from __future__ import annotations

import logging

import pytest

from kstream.checkpointstorage.metadata import CheckpointMetadata, TaskSnapshot
from kstream.config import CheckpointingConfig, RestartStrategy
from kstream.protocol.commands import Fail, Send
from kstream.protocol.coordinator import CheckpointCoordinator
from kstream.protocol.messages import JobFailed, Restore, RestoreFailed, Resume, TaskReady
from kstream.protocol.recovery import RecoveredState

OBJ = "file:///s/app/shared/ab12"


def _meta(n: int) -> CheckpointMetadata:
    return CheckpointMetadata(n, 1, 0.0, 1.0, {t: TaskSnapshot(f"h/{t}/{n}") for t in "ab"})


def _coordinator() -> CheckpointCoordinator:
    retained = [_meta(5), _meta(6), _meta(7)]
    rec = RecoveredState(
        max_checkpoint_id=7, attempt=1, latest_completed=retained[-1], retained=retained
    )
    return CheckpointCoordinator(
        frozenset("ab"),
        CheckpointingConfig(interval=1.0),
        RestartStrategy(),
        recovered=rec,
    )


def _restore_at(c: CheckpointCoordinator, t: float) -> list[Send | Fail]:
    out: list[Send | Fail] = []
    while not out and t < 100:
        out = c.tick(t)  # type: ignore[assignment]
        t += 0.5
    return out


def test_every_task_restores_the_next_older_checkpoint_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    c = _coordinator()
    c.start(0.0)
    assert c.tick(0.0) == [Send(Restore(2, 7))]
    with caplog.at_level(logging.ERROR):
        assert c.handle(RestoreFailed(2, "a", "w1", 7, "sha256 mismatch", OBJ), 0.1) == []
        # Another task's failure of the same restore: already handled, said once.
        assert c.handle(RestoreFailed(2, "b", "w2", 7, "sha256 mismatch", OBJ), 0.2) == []
    lines = [r.getMessage() for r in caplog.records if "RESTORE FAILED" in r.getMessage()]
    assert lines == [
        f"RESTORE FAILED: checkpoint 7 cannot be restored — {OBJ} is corrupt or missing "
        "(task a on w1: sha256 mismatch); restoring EVERY task from the older checkpoint 6"
    ]
    assert _restore_at(c, 0.3) == [Send(Restore(3, 6))]  # one restore point for all tasks
    # A stale ready of the failed attempt does not count; the new attempt resumes.
    assert c.handle(TaskReady(2, "b", "w2", 1), 1.0) == []
    c.handle(TaskReady(3, "a", "w1", 1), 1.1)
    assert c.handle(TaskReady(3, "b", "w2", 1), 1.2) == [Send(Resume(3, {"a": "w1", "b": "w2"}))]
    assert c.restore_points.unrestorable.keys() == {7}


def test_the_job_fails_when_no_retained_checkpoint_can_be_restored() -> None:
    c = _coordinator()
    c.start(0.0)
    c.tick(0.0)
    attempt = 2
    for n, older in ((7, 6), (6, 5)):
        c.handle(RestoreFailed(attempt, "b", "w2", n, "missing", OBJ), 1.0)
        attempt += 1
        assert _restore_at(c, 1.0) == [Send(Restore(attempt, older))]
    cmds = c.handle(RestoreFailed(attempt, "a", "w1", 5, "missing", OBJ), 9.0)
    reason = (
        f"checkpoint 5 cannot be restored ({OBJ}: task a: missing) and no older retained "
        "checkpoint is left"
    )
    assert cmds == [Send(JobFailed(reason)), Fail(reason)]


def test_a_failure_report_for_another_restore_is_ignored() -> None:
    c = _coordinator()
    c.start(0.0)
    c.tick(0.0)
    assert c.handle(RestoreFailed(1, "a", "w1", 7, "old attempt", OBJ), 0.1) == []
    assert c.handle(RestoreFailed(2, "a", "w1", 6, "not this checkpoint", OBJ), 0.1) == []
    assert c.restore_points.unrestorable == {} and c.ignored_messages == 2


def test_the_job_stops_rather_than_fall_back_past_output_a_sink_published(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 37 point B: checkpoint 7 cannot be restored, but task a's exactly-once sink
    already published checkpoint 7's output; restoring 6 would process that input again
    and publish its output twice. The job fails, naming the checkpoints, and never
    falls back further (an older checkpoint is further behind the marker)."""
    c = _coordinator()
    c.start(0.0)
    c.tick(0.0)
    c.handle(RestoreFailed(2, "b", "w2", 7, "sha256 mismatch", OBJ), 0.1)
    assert _restore_at(c, 0.2) == [Send(Restore(3, 6))]
    why = "its exactly-once sink already published the output of checkpoint 7 (...)"
    cmds = c.handle(RestoreFailed(3, "a", "w1", 6, why, "app.commits", 7), 1.0)
    reason = (
        "exactly-once cannot be kept: checkpoint 6 is the newest restorable one (not "
        "restorable: 7, named above), but task a's sink "
        "already published the output of checkpoint 7 (app.commits); restoring 6 would "
        "publish output twice. Restore the newer checkpoint's objects, or accept "
        "re-published output by starting from it with --from-checkpoint 6"
    )
    assert cmds == [Send(JobFailed(reason)), Fail(reason)]
    assert c.tick(5.0) == []  # no older restore: the job failed


def _resumed_after_falling_back(*, cooperative: bool) -> CheckpointCoordinator:
    """A job of isolated tasks a (w1) and b (w2) that could not restore checkpoint 7,
    resumed from 6 in attempt 3 — nothing completed since: 7 is still the latest."""
    from tests.test_carrying import ISOLATED

    retained = [_meta(5), _meta(6), _meta(7)]
    rec = RecoveredState(
        max_checkpoint_id=7, attempt=1, latest_completed=retained[-1], retained=retained
    )
    c = CheckpointCoordinator(
        frozenset("ab"),
        CheckpointingConfig(interval=100.0),
        RestartStrategy(),
        recovered=rec,
        description=ISOLATED,
        cooperative=cooperative,
        heartbeat_timeout=60.0,
    )
    c.start(0.0)
    assert c.tick(0.0) == [Send(Restore(2, 7))]
    c.handle(RestoreFailed(2, "a", "w1", 7, "sha256 mismatch", OBJ), 0.1)
    assert _restore_at(c, 0.3) == [Send(Restore(3, 6))]
    c.handle(TaskReady(3, "a", "w1", 1), 1.0)
    assert c.handle(TaskReady(3, "b", "w2", 1), 1.0) == [Send(Resume(3, {"a": "w1", "b": "w2"}))]
    assert c.latest_completed is not None and c.latest_completed.checkpoint_id == 7
    return c


def test_after_a_fall_back_a_released_task_is_not_carried_at_the_unrestorable_checkpoint() -> None:
    """Before, the release carried b at checkpoint 7, the one a task could not restore,
    and its adopter restored b from it while a ran from 6. Now every task restores 6."""
    from kstream.protocol.messages import AdoptRequest, TasksReleased

    c = _resumed_after_falling_back(cooperative=True)
    c.handle(TasksReleased("w2", 3, 1, ("b",)), 1.5)
    assert c.attempt == 3 and c.carried.snapshots == {}
    assert c.handle(AdoptRequest("w3", 3, 2, ("b",)), 1.6) == []  # (not an Adopt)
    assert _restore_at(c, 1.7) == [Send(Restore(4, 6))]


def test_after_a_fall_back_a_silent_worker_is_not_carried_at_the_unrestorable_checkpoint() -> None:
    from kstream.protocol.messages import Heartbeat

    c = _resumed_after_falling_back(cooperative=False)
    c.handle(Heartbeat("w2", ("b",), 1), 1.0)
    t, out = 1.0, []
    while t < 70.0:  # w2 is silent from 1.0 on
        c.handle(Heartbeat("w1", ("a",), 1), t)
        out += c.tick(t)
        if t < 10.0:
            assert c.carried.members == {} and c.carried.snapshots == {}
        t += 0.5
    # Lost at its heartbeat timeout: every task restores checkpoint 6 again.
    assert Send(Restore(4, 6)) in out
