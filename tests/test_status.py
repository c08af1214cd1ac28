"""`kstream status` from fed control messages and history records (no broker)."""

from __future__ import annotations

from kstream.checkpointstorage.history import CheckpointFailure, RestartRecord
from kstream.checkpointstorage.metadata import CheckpointMetadata, TaskSnapshot
from kstream.monitor.history import history_rows
from kstream.monitor.status import (
    LagRow,
    build_status,
    committed_source_positions,
    source_positions,
)
from kstream.monitor.view import ControlView, Phase
from kstream.names import is_repartition_topic
from kstream.protocol.messages import (
    AcknowledgeCheckpoint,
    CheckpointAborted,
    CheckpointCompleted,
    Heartbeat,
    Message,
    Restore,
    Resume,
    TaskFailed,
    TaskReady,
    TriggerCheckpoint,
)

T0 = 1_700_000_000.0


def _view(messages: list[tuple[float, Message]]) -> ControlView:
    view = ControlView()
    for dt, msg in messages:
        view.apply(T0 + dt, msg)
    return view


HISTORY: list[tuple[float, Message]] = [
    (0.0, Restore(1, None)),
    (0.5, TaskReady(1, "s0-0", "w1", 1)),
    (0.6, TaskReady(1, "s0-1", "w2", 1)),
    (0.7, Resume(1, {"s0-0": "w1", "s0-1": "w2"})),
    (1.0, TriggerCheckpoint(1, 1, 0)),
    (1.2, AcknowledgeCheckpoint(1, "s0-0", 1, TaskSnapshot("h"))),
    (1.3, AcknowledgeCheckpoint(1, "s0-1", 1, TaskSnapshot("h"))),
    (1.4, CheckpointCompleted(1, 1)),
    (2.0, TaskFailed("s0-1", "w2", 1, "ValueError: bad")),
    (2.0, CheckpointAborted(2, "job failover: task s0-1 failed on w2: ValueError: bad")),
    (2.1, Restore(2, 1)),
    (2.5, TaskReady(2, "s0-0", "w1", 1)),
    (2.6, TaskReady(2, "s0-1", "w1", 1)),
    (2.7, Resume(2, {"s0-0": "w1", "s0-1": "w1"})),
    (3.0, Heartbeat("w1", ("s0-0", "s0-1"), 2)),
    (3.0, Heartbeat("gone", ("s0-9",), 1)),
    (9.0, TriggerCheckpoint(3, 2, 0)),
    (9.5, AcknowledgeCheckpoint(3, "s0-0", 2, TaskSnapshot("h"))),
    (10.0, Heartbeat("w1", ("s0-0", "s0-1"), 2)),
]


def test_view_folds_the_control_topic() -> None:
    view = _view(HISTORY)
    assert (view.phase, view.attempt, view.restore_checkpoint) == (Phase.RUNNING, 2, 1)
    assert view.owners == {"s0-0": "w1", "s0-1": "w1"}
    assert view.in_flight == {3: T0 + 9.0} and view.acks == {3: {"s0-0"}}
    assert view.last_completed == 1
    assert view.coordinator_last == "triggered checkpoint 3"
    assert [(e.kind, e.attempt, e.task) for e in view.events] == [
        ("restore", 1, None),
        ("task_failed", 1, "s0-1"),
        ("checkpoint_aborted", None, None),
        ("restore", 2, None),
    ]


def _meta(n: int, trigger: float, done: float) -> CheckpointMetadata:
    return CheckpointMetadata(
        n,
        2,
        T0 + trigger,
        T0 + done,
        {
            "s0-0": TaskSnapshot("h", {"in:0": 40}, 2048, 1024, 1.0, 2.0, 3.0, 150.0, "w1"),
            "s0-1": TaskSnapshot("h", {"in:1": 7}, 2048, 0, 5.0, 2.0, 3.0, 180.0, "w1"),
        },
    )


def test_status_of_a_running_job_as_json_and_text() -> None:
    view = _view(HISTORY)
    completed = [_meta(1, 1.0, 1.4)]
    failed = [
        CheckpointFailure(2, 1, "aborted", "job failover: task s0-1 failed", T0 + 1.8, T0 + 2.0)
    ]
    restarts = [
        RestartRecord(1, T0, "job start", None),
        RestartRecord(2, T0 + 2.1, "task s0-1 failed on w2: ValueError: bad", 1),
    ]
    positions = source_positions(completed[-1])
    assert positions == {("in", 0): 40, ("in", 1): 7}
    lag = [LagRow("in", 1, 7, 7), LagRow("in", 0, 40, 100)]
    st = build_status("wc", view, history_rows(completed, failed), restarts, lag, T0 + 10.5)
    doc = st.to_dict()
    assert (doc["phase"], doc["attempt"], doc["total_lag"]) == ("running", 2, 60)
    assert doc["coordinator"] == {"last_seen_s": 1.5, "last_action": "triggered checkpoint 3"}
    assert doc["workers"] == [
        {
            "member": "gone",
            "name": "gone",
            "tasks": ["s0-9"],
            "owns": [],
            "generation": 1,
            "last_heartbeat_s": 7.5,
        },
        {
            "member": "w1",
            "name": "w1",
            "tasks": ["s0-0", "s0-1"],
            "owns": ["s0-0", "s0-1"],
            "generation": 2,
            "last_heartbeat_s": 0.5,
        },
    ]
    # A member silent for more than a minute is no longer listed.
    later = build_status("wc", view, [], [], [], T0 + 70.0)
    assert [w.member for w in later.workers] == ["w1"]
    assert [(c["checkpoint_id"], c["status"]) for c in doc["checkpoints"]] == [
        (1, "completed"),
        (2, "aborted"),
    ]
    assert doc["checkpoints"][0]["slowest_task"] == "s0-1"
    assert doc["in_flight"] == [{"checkpoint_id": 3, "age_s": 1.5, "acknowledged": 1}]
    assert [(e["kind"], e["cause"], e["reason"]) for e in doc["events"]] == [
        ("restore", "start", "to checkpoint None: job start"),
        ("task_failed", None, "ValueError: bad"),
        ("checkpoint_aborted", None, "2: job failover: task s0-1 failed on w2: ValueError: bad"),
        ("restore", "task_failed", "to checkpoint 1: task s0-1 failed on w2: ValueError: bad"),
    ]
    assert doc["stopped"] is None
    assert doc["lag"] == [
        {"topic": "in", "partition": 0, "checkpoint_offset": 40, "end_offset": 100, "lag": 60},
        {"topic": "in", "partition": 1, "checkpoint_offset": 7, "end_offset": 7, "lag": 0},
    ]
    text = "\n".join(st.render())
    assert text.startswith("app wc: running, attempt 2")
    assert "coordinator  triggered checkpoint 3, 1.5s ago" in text
    assert "s0-0, s0-1   heartbeat 0.5s ago" in text
    assert "gone" in text and "s0-9 (owns none)   silent: no heartbeat for 7.5s" in text
    assert "       3  in flight for 1.5s, 1 task(s) acknowledged" in text
    assert "task_failed         attempt 1 task s0-1    ValueError: bad" in text
    assert "  in[0]" in text and "lag         60" in text and "total lag 60" in text


def test_status_before_the_first_checkpoint() -> None:
    view = _view([(0.0, Restore(1, None)), (0.4, TaskReady(1, "s0-0", "w1", 1))])
    st = build_status("wc", view, [], [], [], T0 + 1.0)
    assert (st.phase, st.tasks_ready) == ("restoring", 1)
    text = "\n".join(st.render())
    assert "restoring to checkpoint None: 1 task(s) ready" in text
    assert "  none yet" in text
    assert "unknown: no completed checkpoint and no committed offset yet" in text


def test_status_of_a_job_without_checkpoints_uses_the_groups_committed_offsets() -> None:
    committed = {("in", 0): 90, ("in", 1): 5, ("wc.stage0.repartition", 0): 70}
    positions = committed_source_positions("wc", committed)
    assert positions == {("in", 0): 90, ("in", 1): 5}  # internal topics left out
    lag = [LagRow(t, p, o, 100) for (t, p), o in positions.items()]
    st = build_status("wc", ControlView(), [], [], lag, T0, lag_basis="committed")
    doc = st.to_dict()
    assert (doc["phase"], doc["lag_basis"], doc["total_lag"]) == ("not started", "committed", 105)
    text = "\n".join(st.render())
    assert "source lag (records after the group's committed offsets)" in text
    assert (
        "  in[1]                          committed          5  end        100  lag         95"
        in text
    )
    assert is_repartition_topic("wc", "wc.stage1.repartition2")
    assert not is_repartition_topic("wc", "other.stage1.repartition")
    assert not is_repartition_topic("wc", "wc.control")
