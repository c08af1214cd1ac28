"""A stopped job is reported stopped (when, why) and triggers nothing more; a failover
names its cause and its worker. The coordinator and the status view as state machines
with a fake clock (the kill -9 on a real broker: integration/test_metrics_status.py)."""

from __future__ import annotations

from kstream.checkpointstorage.history import RestartRecord
from kstream.metrics.labels import restart_cause
from kstream.monitor.status import build_status
from kstream.monitor.view import ControlView
from kstream.names import member_client_id
from kstream.protocol.causes import SILENT_AFTER_S
from kstream.protocol.failover import JobPhase
from kstream.protocol.messages import (
    REASSIGNED,
    CheckpointAborted,
    CheckpointRequest,
    Heartbeat,
    JobStopped,
    Message,
    Restore,
    Resume,
    TaskFailed,
    TaskReady,
    TriggerCheckpoint,
    WorkerStopped,
    decode,
    encode,
)
from kstream.protocol.recovery import recover
from tests.test_coordinator import Harness, messages, triggers

T0 = 1_700_000_000.0
IDLE = "no input for 5.0s and all output committed"


def two_owners() -> Harness:
    """A job of tasks a, b resumed in attempt 1 with a on w1 and b on w2."""
    h = Harness(tasks=["a", "b"], history=[Resume(1, {"a": "w1", "b": "w2"})], interval=1.0)
    h.start(0.0)
    h.send(Heartbeat("w1", ("a",), 4), 0.0)
    h.send(Heartbeat("w2", ("b",), 4), 0.0)
    return h


def test_the_messages_round_trip() -> None:
    for msg in (JobStopped(3, "stopped with savepoint x"), WorkerStopped("h:1-x", 3, IDLE)):
        assert decode(encode(msg)) == msg


def test_when_every_owner_stopped_the_job_stops_and_nothing_is_triggered() -> None:
    h = two_owners()
    assert triggers(h.tick(1.0)) == [1]
    assert h.send(WorkerStopped("w1", 1, IDLE), 1.5) == []  # w2 still runs: it takes a over
    out = h.send(WorkerStopped("w2", 1, IDLE), 1.6)
    reason = f"every worker stopped (w1: {IDLE}; w2: {IDLE})"
    assert messages(out) == [
        CheckpointAborted(1, f"job stopped: {reason}"),  # in flight: can never complete
        JobStopped(1, reason),
    ]
    assert h.c.phase is JobPhase.STOPPED
    # A request that crossed the stop, and time passing, trigger nothing; a stopped
    # worker is not lost.
    assert h.send(CheckpointRequest("w2", 1, "idle"), 1.7) == []
    assert h.tick(100.0) == []
    assert h.send(Heartbeat("w1", ("a",), 4), 100.0) == []  # (a late beat of a stopped one)


def test_a_worker_that_joins_the_stopped_job_starts_it_again() -> None:
    h = two_owners()
    h.send(WorkerStopped("w1", 1, IDLE), 1.0)
    h.send(WorkerStopped("w2", 1, IDLE), 1.0)
    assert h.send(Heartbeat("w2", ("b",), 4), 50.0) == []  # sent before it stopped
    assert h.tick(50.0) == []
    # An emptied group may start over at generation 1: any worker that did not stop counts.
    h.send(Heartbeat("w3", (), 1), 50.0)
    out = h.tick(50.0)
    assert messages(out) == [Restore(2, None)]
    assert restart_cause(h.c.failover.failure_reason) == "start"


def test_a_restarted_coordinator_starts_a_stopped_job_as_a_start() -> None:
    rec = recover([Resume(1, {"a": "w1"}), JobStopped(1, "stopped with savepoint x")], [], None)
    assert isinstance(rec.last_lifecycle, JobStopped)
    h = Harness(tasks=["a"], history=[Resume(1, {"a": "w1"}), JobStopped(1, "x")])
    h.start(0.0)
    assert messages(h.tick(0.0)) == [Restore(2, None)]
    assert restart_cause(h.c.failover.failure_reason) == "start"


def test_a_coordinator_elected_after_its_hosts_kill_names_the_lost_worker() -> None:
    """kill -9 of w1, which hosted the elected coordinator and owned a: the survivor w2
    reports a given to it, and the coordinator elected next finds that report unhandled.
    It never heard w1: a lost worker, not a task failure."""
    history: list[Message] = [
        Resume(1, {"a": "w1", "b": "w2"}),
        TaskFailed("a", "w2", 1, REASSIGNED),
    ]
    h = Harness(tasks=["a", "b"], history=history)
    h.start(0.0)
    assert messages(h.tick(0.0)) == [Restore(2, None)]
    reason = "worker w1 lost: no heartbeat; the group gave its tasks a to w2"
    assert h.c.failover.failure_reason == reason
    assert restart_cause(reason) == "worker_lost"


def _reassigned(h: Harness, member: str, tasks: list[str], now: float) -> list[Message]:
    out = []
    for t in tasks:
        out += messages(h.send(TaskFailed(t, member, 1, REASSIGNED), now))
    return out


def test_a_killed_worker_is_a_lost_worker_not_a_task_failure() -> None:
    """kill -9 of w1: after the session timeout the group gives its partitions to w2,
    which reports each task it holds but does not run; w1 has been silent all along."""
    h = two_owners()
    h.send(Heartbeat("w2", ("b",), 4), 9.0)
    _reassigned(h, "w2", ["a", "b"], 10.5)
    reason = "worker w1 lost: no heartbeat for 10.5s; the group gave its tasks a to w2"
    assert h.c.failover.failure_reason == reason
    assert restart_cause(reason) == "worker_lost"  # the restart metric's label


def test_a_killed_worker_noticed_by_the_group_first_is_a_lost_worker() -> None:
    """kill -9 of w1 with the group's session timeout no longer than the heartbeat
    timeout: the survivor's heartbeat in the new generation comes first."""
    h = two_owners()
    h.send(Heartbeat("w2", ("b",), 4), 5.0)
    h.send(Heartbeat("w2", ("a", "b"), 5), 6.5)
    reason = (
        "worker w1 lost: no heartbeat for 6.5s "
        "(consumer group generation changed 4 -> 5 (partitions were reassigned))"
    )
    assert h.c.failover.failure_reason == reason
    assert restart_cause(reason) == "worker_lost"


def test_a_survivor_whose_tasks_were_revoked_names_the_killed_worker() -> None:
    """The eager protocol revokes every partition first: the survivor's heartbeat in the
    old generation holds no task; w1 has been silent since the kill."""
    h = two_owners()
    h.send(Heartbeat("w2", ("b",), 4), 5.0)
    h.send(Heartbeat("w2", (), 4), 6.5)
    reason = (
        "worker w1 lost: no heartbeat for 6.5s (worker w2 no longer runs its tasks b of "
        "attempt 1 (the group rebalanced or the worker restarted): restoring them)"
    )
    assert h.c.failover.failure_reason == reason
    assert restart_cause(reason) == "worker_lost"


def test_a_generation_change_after_a_worker_stopped_says_it_stopped() -> None:
    h = two_owners()
    h.send(WorkerStopped("w1", 1, "stopping: the final checkpoint completed"), 1.0)
    h.send(Heartbeat("w2", ("b",), 5), 1.5)
    reason = (
        "worker w1 stopped (stopping: the final checkpoint completed; "
        "consumer group generation changed 4 -> 5 (partitions were reassigned))"
    )
    assert h.c.failover.failure_reason == reason
    assert restart_cause(reason) == "worker_stopped"


def test_a_task_given_away_while_its_owner_heartbeats_is_a_rebalance() -> None:
    h = two_owners()
    h.send(Heartbeat("w1", ("a",), 4), 10.0)
    _reassigned(h, "w2", ["a"], 10.0 + SILENT_AFTER_S / 2)
    reason = "worker w2 was assigned task a of w1, which still heartbeats (the group rebalanced)"
    assert h.c.failover.failure_reason == reason
    assert restart_cause(reason) == "rebalance"


def test_a_task_given_away_by_a_stopped_owner_says_it_stopped() -> None:
    h = two_owners()
    h.send(WorkerStopped("w1", 1, "stopping: the final checkpoint completed"), 5.0)
    _reassigned(h, "w2", ["a"], 6.0)
    reason = (
        "worker w1 stopped (stopping: the final checkpoint completed); "
        "the group gave its tasks a to w2"
    )
    assert h.c.failover.failure_reason == reason
    assert restart_cause(reason) == "worker_stopped"


def test_the_causes_of_the_other_failovers() -> None:
    h = two_owners()
    h.send(TaskFailed("a", "w1", 1, "restore failed (store unreachable): timed out"), 1.0)
    assert restart_cause(h.c.failover.failure_reason) == "store_unreachable"
    h = two_owners()
    h.send(TaskFailed("a", "w1", 1, "ValueError: bad"), 1.0)
    assert restart_cause(h.c.failover.failure_reason) == "task_failed"
    h = two_owners()
    h.send(Heartbeat("w2", ("b",), 4), 5.0)
    h.tick(11.0)  # w1 silent past the heartbeat timeout
    assert h.c.failover.failure_reason == "worker w1 lost: no heartbeat for 11.0s (tasks a)"
    assert restart_cause(h.c.failover.failure_reason) == "worker_lost"
    h = two_owners()
    h.send(Heartbeat("w1", ("a",), 5), 1.0)  # a worker joined: every owner heartbeats
    assert h.c.failover.failure_reason == (
        "consumer group generation changed 4 -> 5 (partitions were reassigned)"
    )
    assert restart_cause(h.c.failover.failure_reason) == "rebalance"


# -- the status view ---------------------------------------------------------------------

MEMBER = "host-a:4242-3f2a1c6e-9b1d-4c55-8f0e-1a2b3c4d5e6f"
OTHER = "host-b:77-0c9e8d7f-6a5b-4c3d-9e1f-2a3b4c5d6e7f"
RUNNING: list[tuple[float, Message]] = [
    (0.0, Restore(1, None)),
    (0.1, TaskReady(1, "s0-0", MEMBER, 1)),
    (0.2, Resume(1, {"s0-0": MEMBER})),
    (1.0, Heartbeat(MEMBER, ("s0-0",), 1)),
]


def _status(history: list[tuple[float, Message]], now: float, **kw: object) -> dict[str, object]:
    view = ControlView()
    for dt, msg in history:
        view.apply(T0 + dt, msg)
    st = build_status("wc", view, [], list(kw.get("restarts", [])), [], T0 + now)  # type: ignore[call-overload]
    doc = st.to_dict()
    doc["text"] = "\n".join(st.render())
    return doc


def test_status_after_stop_when_idle_says_stopped_when_and_why() -> None:
    """The coordinator of `kstream run --stop-when-idle` may be gone before it reads the
    worker's report, and it triggered one more checkpoint: still stopped, none in flight."""
    doc = _status(
        [*RUNNING, (5.0, TriggerCheckpoint(1, 1, 0)), (5.1, WorkerStopped(MEMBER, 1, IDLE))],
        8.0,
    )
    reason = f"its worker stopped ({MEMBER}: {IDLE})"
    assert doc["phase"] == "stopped"
    assert doc["stopped"] == {"time": T0 + 5.1, "reason": reason}
    assert doc["in_flight"] == []
    assert doc["workers"] == []
    text = str(doc["text"])
    assert text.startswith("app wc: stopped, attempt 1")
    assert text.splitlines()[1] == f"  stopped 2023-11-14T22:13:25.100+00:00: {reason}"
    assert "in flight" not in text


def test_status_after_a_stop_with_savepoint_ignores_a_later_trigger() -> None:
    """What an older coordinator wrote: JobStopped, then a TriggerCheckpoint."""
    doc = _status(
        [
            *RUNNING,
            (5.0, JobStopped(1, "stopped with savepoint last (checkpoint 4)")),
            (5.2, TriggerCheckpoint(5, 1, 0)),
        ],
        9.0,
    )
    assert doc["phase"] == "stopped"
    assert doc["stopped"] == {
        "time": T0 + 5.0,
        "reason": "stopped with savepoint last (checkpoint 4)",
    }
    assert doc["in_flight"] == []


def test_a_restore_after_a_stop_is_a_new_start() -> None:
    doc = _status([*RUNNING, (5.0, JobStopped(1, "x")), (6.0, Restore(2, None))], 7.0)
    assert (doc["phase"], doc["stopped"]) == ("restoring", None)


def test_one_worker_of_two_stopping_is_not_a_stopped_job() -> None:
    history: list[tuple[float, Message]] = [
        (0.0, Restore(1, None)),
        (0.2, Resume(1, {"s0-0": MEMBER, "s0-1": OTHER})),
        (5.0, WorkerStopped(MEMBER, 1, IDLE)),
    ]
    doc = _status(history, 6.0)
    assert (doc["phase"], doc["stopped"]) == ("running", None)


def test_a_killed_worker_is_one_event_and_a_worker_lost_restore_naming_host_and_pid() -> None:
    tasks = [f"s0-{i}" for i in range(9)]
    history: list[tuple[float, Message]] = [
        (0.0, Restore(1, None)),
        (0.2, Resume(1, {t: (MEMBER if i % 2 else OTHER) for i, t in enumerate(tasks)})),
        (1.0, Heartbeat(OTHER, tuple(tasks[::2]), 1)),
        *[(11.0, TaskFailed(t, OTHER, 1, REASSIGNED)) for t in tasks],
        (11.1, Restore(2, None)),
        (11.5, Heartbeat(OTHER, tuple(tasks), 2)),
    ]
    lost = "worker host-a:4242-3f2a1c6e-9b1d-4c55-8f0e-1a2b3c4d5e6f lost: no heartbeat for 11.0s"
    doc = _status(history, 12.0, restarts=[RestartRecord(2, T0 + 11.1, lost, None)])
    events = doc["events"]
    assert isinstance(events, list)
    assert [(e["kind"], e["cause"], e["reason"]) for e in events] == [
        ("restore", None, "to checkpoint None"),
        ("reassigned", None, f"{OTHER} was given tasks it does not run: {', '.join(tasks)}"),
        ("restore", "worker_lost", f"to checkpoint None: {lost}"),
    ]
    workers = doc["workers"]
    assert isinstance(workers, list)
    assert [(w["member"], w["name"]) for w in workers] == [(OTHER, "host-b:77")]
    assert f"  host-b:77 ({OTHER})" in str(doc["text"])
    assert "restore (worker_lost)" in str(doc["text"])


def test_a_member_is_named_by_its_client_id() -> None:
    assert member_client_id(MEMBER) == "host-a:4242"
    assert member_client_id("rdkafka-55410d7a-1b2c-4d3e-8f9a-0b1c2d3e4f5a") == "rdkafka"
    assert member_client_id("w1") == "w1"
