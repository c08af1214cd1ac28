"""What a starting coordinator learns from the control topic and the store (docs/design.md §5.9).

A starting coordinator first fences its predecessor, then reads the control
topic to its end (read_committed) and the store's metadata, and summarises them
here: the highest checkpoint id and attempt ever used (so ids never repeat), the
job's phase, checkpoints left in flight, and whether the newest completed
checkpoint was announced.

**Only authority counts.** Ids and attempts come from the store's completed
checkpoints and from coordinator messages — which the channel passes on only when
signed by a coordinator of the job (``kstream.protocol.signing.verify``), i.e.
from the coordinators' own transactional writes. Workers' messages (acks,
declines, readies, failures) are reports anyone could forge: they never raise an
id or an attempt; an ack only adds a handle to a checkpoint a coordinator
triggered, and a task failure counts only for the current attempt.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from kstream.checkpointstorage.history import CheckpointFailure, CheckpointStatus
from kstream.checkpointstorage.metadata import CheckpointMetadata
from kstream.protocol.batching import ResumeParts
from kstream.protocol.commands import CleanupCheckpoint, Command, Send
from kstream.protocol.elasticmessages import released_by
from kstream.protocol.messages import (
    AcknowledgeCheckpoint,
    AcknowledgeCheckpoints,
    Adopt,
    CheckpointAborted,
    CheckpointCompleted,
    JobFailed,
    JobStopped,
    Message,
    Restore,
    Resume,
    TaskFailed,
    TasksReleased,
    TriggerCheckpoint,
)

log = logging.getLogger(__name__)


@dataclass
class RecoveredState:
    """The history a coordinator continues from."""

    max_checkpoint_id: int = 0
    attempt: int = 0
    # The last lifecycle message: None (job never restored), Resume, Restore, JobFailed
    # or JobStopped.
    last_lifecycle: Restore | Resume | JobFailed | JobStopped | None = None
    announced_id: int = 0  # newest CheckpointCompleted seen
    in_flight: dict[int, set[str]] = field(default_factory=dict)  # triggered, unfinished → handles
    latest_completed: CheckpointMetadata | None = None
    # Every readable completed checkpoint still in the store, ascending (restore fallbacks).
    retained: list[CheckpointMetadata] = field(default_factory=list)
    unhandled_failure: str = ""  # a TaskFailed of the current attempt after the last lifecycle
    unhandled_report: TaskFailed | None = None  # that TaskFailed itself
    # Set when the job starts from an imported checkpoint or savepoint: a first start
    # (restored at once, not counted by the restart strategy), whatever ran before.
    starting_from: str = ""
    # Tasks adopted since the last Resume (kstream.protocol.adoption) -> their adopter
    # (released and not adopted yet: ``released_by`` the worker that released them).
    adopted: dict[str, str] = field(default_factory=dict)

    @property
    def owners(self) -> dict[str, str]:
        """Task owners of the current attempt (its Resume's, then its adoptions), if the
        job was resumed."""
        if not isinstance(self.last_lifecycle, Resume):
            return {}
        return {**self.last_lifecycle.owners, **self.adopted}


def recover(
    messages: Iterable[Message],
    completed_ids: Iterable[int],
    latest_completed: CheckpointMetadata | None,
) -> RecoveredState:
    """Summarise the control-topic history and the store's completed checkpoints."""
    st = RecoveredState(latest_completed=latest_completed)
    completed = set(completed_ids)
    st.max_checkpoint_id = max(completed, default=0)
    resumes = ResumeParts()
    for part in messages:
        msg = resumes.whole(part)
        match msg:
            case TriggerCheckpoint(checkpoint_id=n, attempt=a):
                st.max_checkpoint_id = max(st.max_checkpoint_id, n)
                st.attempt = max(st.attempt, a)
                st.in_flight.setdefault(n, set())
            case AcknowledgeCheckpoint(checkpoint_id=n):
                if n in st.in_flight:
                    st.in_flight[n].add(msg.snapshot.handle)
            case AcknowledgeCheckpoints(checkpoint_id=n):
                if n in st.in_flight:
                    st.in_flight[n].update(s.handle for s in msg.snapshots.values())
            case CheckpointCompleted(checkpoint_id=n, attempt=a):
                st.max_checkpoint_id = max(st.max_checkpoint_id, n)
                st.attempt = max(st.attempt, a)
                st.announced_id = max(st.announced_id, n)
                st.in_flight = {k: v for k, v in st.in_flight.items() if k > n}
            case CheckpointAborted(checkpoint_id=n):
                st.max_checkpoint_id = max(st.max_checkpoint_id, n)
                st.in_flight.pop(n, None)
            case Restore(attempt=a) | Resume(attempt=a):
                st.attempt = max(st.attempt, a)
                st.last_lifecycle = msg
                st.unhandled_failure, st.unhandled_report = "", None
                st.adopted = {}
            case Adopt(attempt=a) if a == st.attempt:
                st.adopted.update({t: msg.member for t in msg.tasks})
            case TasksReleased(attempt=a) if a == st.attempt:
                st.adopted.update({t: released_by(msg.member) for t in msg.tasks})
            case JobFailed() | JobStopped():
                st.last_lifecycle = msg
                st.unhandled_failure, st.unhandled_report = "", None
            case TaskFailed(attempt=a) if a == st.attempt:
                st.unhandled_failure = f"task {msg.task_id} failed on {msg.member}: {msg.reason}"
                st.unhandled_report = msg
            case None:
                pass  # a part of a Resume: more to come
            case _:
                pass  # heartbeats, readies and declines carry no history
    # A checkpoint whose metadata exists completed, announced or not.
    st.in_flight = {n: h for n, h in st.in_flight.items() if n not in completed}
    return st


def predecessor_leftovers(
    rec: RecoveredState, latest: CheckpointMetadata | None, now: float
) -> tuple[list[Command], list[CheckpointFailure]]:
    """What a starting coordinator finishes of its predecessor's work: a completion whose
    announcement was lost (crash between metadata and message) is announced again
    (receivers are idempotent); the unfinished checkpoints, which can never complete
    now, are aborted and cleaned up (and recorded as aborted)."""
    cmds: list[Command] = []
    if latest is not None and latest.checkpoint_id > rec.announced_id:
        log.info("announcing checkpoint %d again (announcement lost)", latest.checkpoint_id)
        cmds.append(Send(CheckpointCompleted(latest.checkpoint_id, latest.attempt)))
    ended: list[CheckpointFailure] = []
    for n, handles in sorted(rec.in_flight.items()):
        cmds += [
            Send(CheckpointAborted(n, "coordinator restarted")),
            CleanupCheckpoint(n, tuple(sorted(handles))),
        ]
        ended.append(  # its trigger time died with the predecessor
            CheckpointFailure(
                n, rec.attempt, CheckpointStatus.ABORTED, "coordinator restarted", now, now
            )
        )
    return cmds, ended
