"""What the control topic says about a running job, folded message by message.

Pure: fed ``(record timestamp, message)`` pairs in topic order, no I/O, so
``kstream status`` is tested with fed data and ``--watch`` only feeds the new ones.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from kstream.protocol.batching import ResumeParts
from kstream.protocol.causes import stopped_reason
from kstream.protocol.messages import (
    REASSIGNED,
    AcknowledgeCheckpoint,
    AcknowledgeCheckpoints,
    CheckpointAborted,
    CheckpointCompleted,
    DeclineCheckpoint,
    Heartbeat,
    JobFailed,
    JobStopped,
    Message,
    Restore,
    Resume,
    TaskFailed,
    TaskReady,
    TasksReady,
    TriggerCheckpoint,
    WorkerStopped,
)

MAX_EVENTS = 50


class Phase:
    """The job's phase as the control topic shows it."""

    NOT_STARTED = "not started"  # no Restore yet
    RESTORING = "restoring"  # Restore written, waiting for every TaskReady
    RUNNING = "running"  # resumed
    FAILED = "failed"  # JobFailed
    STOPPED = "stopped"  # JobStopped, or every owner of the attempt sent WorkerStopped


@dataclass
class MemberView:
    """A worker as its latest heartbeat describes it."""

    member: str
    tasks: tuple[str, ...]
    generation: int
    last_seen: float


@dataclass(frozen=True)
class Event:
    """Something that went wrong, or a restart, with its reason."""

    time: float
    # task_failed | reassigned | checkpoint_declined | checkpoint_aborted | job_failed |
    # restore | worker_stopped | job_stopped
    kind: str
    reason: str
    attempt: int | None = None
    task: str | None = None
    cause: str | None = None  # a restore: its cause (kstream.metrics.labels.RESTART_CAUSES)


@dataclass
class ControlView:
    """The job as seen on ``<app>.control``."""

    attempt: int = 0
    phase: str = Phase.NOT_STARTED
    restore_checkpoint: int | None = None
    owners: dict[str, str] = field(default_factory=dict)
    ready: dict[str, str] = field(default_factory=dict)  # task -> member, while restoring
    members: dict[str, MemberView] = field(default_factory=dict)
    coordinator_seen: float | None = None  # newest record written by a coordinator
    coordinator_last: str = ""
    in_flight: dict[int, float] = field(default_factory=dict)  # checkpoint id -> trigger time
    acks: dict[int, set[str]] = field(default_factory=dict)  # in flight: tasks acknowledged
    last_completed: int | None = None
    stopped_at: float | None = None  # while STOPPED: when, and why
    stopped_reason: str = ""
    stopped_members: dict[str, str] = field(default_factory=dict)  # this attempt: member -> why
    events: deque[Event] = field(default_factory=lambda: deque(maxlen=MAX_EVENTS))
    _resumes: ResumeParts = field(default_factory=ResumeParts, repr=False, compare=False)
    messages: int = 0

    def apply(self, ts: float, msg: Message) -> None:
        """Fold one message (``ts``: its record timestamp, epoch seconds)."""
        self.messages += 1
        if isinstance(msg, Resume):
            whole = self._resumes.add(msg)
            if whole is None:
                return  # more parts to come
            msg = whole
        match msg:
            case Heartbeat():
                self.members[msg.member] = MemberView(msg.member, msg.tasks, msg.generation, ts)
            case TriggerCheckpoint():
                self._coordinator(ts, f"triggered checkpoint {msg.checkpoint_id}")
                if self.phase != Phase.STOPPED:  # (an older coordinator's, after a stop)
                    self.in_flight[msg.checkpoint_id] = ts
            case AcknowledgeCheckpoint():
                if msg.checkpoint_id in self.in_flight:
                    self.acks.setdefault(msg.checkpoint_id, set()).add(msg.task_id)
            case AcknowledgeCheckpoints():
                if msg.checkpoint_id in self.in_flight:
                    self.acks.setdefault(msg.checkpoint_id, set()).update(msg.snapshots)
            case DeclineCheckpoint():
                self.events.append(
                    Event(ts, "checkpoint_declined", msg.reason, msg.attempt, msg.task_id)
                )
            case CheckpointCompleted():
                self._coordinator(ts, f"completed checkpoint {msg.checkpoint_id}")
                self.last_completed = max(self.last_completed or 0, msg.checkpoint_id)
                for n in [n for n in self.in_flight if n <= msg.checkpoint_id]:
                    self._end(n)
            case CheckpointAborted():
                self._coordinator(ts, f"aborted checkpoint {msg.checkpoint_id}")
                self._end(msg.checkpoint_id)
                if not msg.reason.startswith("subsumed"):
                    self.events.append(
                        Event(ts, "checkpoint_aborted", f"{msg.checkpoint_id}: {msg.reason}")
                    )
            case Restore():
                self._coordinator(ts, f"restore of attempt {msg.attempt}")
                self.attempt, self.phase = msg.attempt, Phase.RESTORING
                self.restore_checkpoint, self.ready = msg.checkpoint_id, {}
                self.stopped_at, self.stopped_reason, self.stopped_members = None, "", {}
                self.events.append(
                    Event(ts, "restore", f"to checkpoint {msg.checkpoint_id}", msg.attempt)
                )
            case TaskReady() if msg.attempt == self.attempt:
                self.ready[msg.task_id] = msg.member
            case TasksReady() if msg.attempt == self.attempt:
                self.ready.update(dict.fromkeys(msg.tasks, msg.member))
            case Resume():
                self._coordinator(ts, f"resumed attempt {msg.attempt}")
                self.attempt, self.phase, self.owners = msg.attempt, Phase.RUNNING, dict(msg.owners)
            case JobFailed():
                self._coordinator(ts, "job failed")
                self.phase = Phase.FAILED
                self.events.append(Event(ts, "job_failed", msg.reason, self.attempt))
            case TaskFailed() if msg.reason == REASSIGNED:
                self._reassigned(ts, msg)
            case TaskFailed():
                self.events.append(Event(ts, "task_failed", msg.reason, msg.attempt, msg.task_id))
            case WorkerStopped():
                self.events.append(
                    Event(ts, "worker_stopped", f"{msg.member}: {msg.reason}", msg.attempt)
                )
                self.members.pop(msg.member, None)
                if msg.attempt == self.attempt:
                    self.stopped_members[msg.member] = msg.reason
                    owners = set(self.owners.values())
                    if (
                        self.phase == Phase.RUNNING
                        and owners
                        and owners <= set(self.stopped_members)
                    ):
                        self._stopped(
                            ts, stopped_reason({m: self.stopped_members[m] for m in owners})
                        )
            case JobStopped():
                self._coordinator(ts, "job stopped")
                self._stopped(ts, msg.reason)
                self.events.append(Event(ts, "job_stopped", msg.reason, msg.attempt))
            case _:
                pass

    def _stopped(self, ts: float, reason: str) -> None:
        """The job stopped: no checkpoint in flight can complete any more."""
        self.phase, self.stopped_at, self.stopped_reason = Phase.STOPPED, ts, reason
        self.in_flight.clear()
        self.acks.clear()

    def _reassigned(self, ts: float, msg: TaskFailed) -> None:
        """A worker given tasks it does not run reports each: one event per worker and
        attempt (the restore's event says why: the owner was lost, stopped, rebalanced)."""
        last = self.events[-1] if self.events else None
        if (
            last is not None
            and last.kind == "reassigned"
            and last.attempt == msg.attempt
            and last.reason.startswith(f"{msg.member} ")
        ):
            self.events[-1] = Event(
                last.time, last.kind, f"{last.reason}, {msg.task_id}", last.attempt
            )
            return
        self.events.append(
            Event(
                ts,
                "reassigned",
                f"{msg.member} was given tasks it does not run: {msg.task_id}",
                msg.attempt,
            )
        )

    def _coordinator(self, ts: float, what: str) -> None:
        self.coordinator_seen, self.coordinator_last = ts, what

    def _end(self, n: int) -> None:
        self.in_flight.pop(n, None)
        self.acks.pop(n, None)
