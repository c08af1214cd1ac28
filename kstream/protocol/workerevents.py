"""What the worker's loop observes (events) and what it carries out (commands): the
vocabulary of :class:`kstream.protocol.worker.WorkerProtocol`, which is fed the first
and returns the second (executed by :mod:`kstream.worker.checkpointed`)."""

from __future__ import annotations

from dataclasses import dataclass

from kstream.protocol.commands import RefusePlan, Send
from kstream.protocol.messages import Message

# ---- what the loop observes ---------------------------------------------------------------


@dataclass(frozen=True)
class Assigned:
    """The group assignment changed: this worker is ``member`` in ``generation``; it holds
    partitions (``any_partitions``), among them every input of ``tasks``."""

    member: str
    generation: int | None
    tasks: tuple[str, ...]
    any_partitions: bool


@dataclass(frozen=True)
class InputRead:
    """Records of a user topic arrived."""


@dataclass(frozen=True)
class OutputBuffered:
    """An exactly-once sink of a running task holds output not yet sealed by a barrier."""


@dataclass(frozen=True)
class StopRequested:
    """Stop gracefully (SIGTERM, or the embedding program)."""


@dataclass(frozen=True)
class TaskStopped:
    """A task stopped here: it failed (``reason``: reported) or was fenced (None)."""

    task_id: str
    attempt: int
    reason: str | None


@dataclass(frozen=True)
class Unrestorable:
    """This worker cannot restore the checkpoint of ``attempt`` (reported to the
    coordinator with ``RestoreFailed``): it holds no task of it."""

    attempt: int


@dataclass(frozen=True)
class QueriesServed:
    """This worker's query endpoint is ``url`` (announced in its heartbeats)."""

    url: str


Event = (
    Message
    | Assigned
    | InputRead
    | OutputBuffered
    | StopRequested
    | TaskStopped
    | Unrestorable
    | QueriesServed
)

# ---- what the loop does (and Send, RefusePlan: kstream.protocol.commands) -------------


@dataclass(frozen=True)
class RestoreTasks:
    """Stop every task; restore every assigned task to checkpoint ``checkpoint_id``
    (None: start positions) in ``attempt``, not running, its inputs paused."""

    attempt: int
    checkpoint_id: int | None


@dataclass(frozen=True)
class StopTasks:
    """Stop every task; ``keep_held``: not those holding after a hand-over checkpoint
    whose inputs are still assigned here (the restore that follows carries them on,
    docs/design.md §6.6)."""

    keep_held: bool = False


@dataclass(frozen=True)
class ResumeTasks:
    """Run the restored tasks in ``owned``; stop the others; seek the inputs again."""

    owned: frozenset[str]


@dataclass(frozen=True)
class TriggerTasks:
    """Inject barrier ``checkpoint_id`` of ``attempt`` into every running task; ``hold``:
    each task holds after its snapshot (a hand-over, docs/design.md §6.6)."""

    checkpoint_id: int
    attempt: int
    hold: bool = False


@dataclass(frozen=True)
class ReleaseTasks:
    """The tasks holding after hand-over checkpoint ``checkpoint_id`` go on from there."""

    checkpoint_id: int


@dataclass(frozen=True)
class AdoptTasks:
    """Restore ``tasks`` (assigned here, run by no one) from completed checkpoint
    ``checkpoint_id`` (None: afresh, at the start positions) and run them in ``attempt``,
    the other tasks running on (docs/design.md §6.8)."""

    attempt: int
    checkpoint_id: int | None
    tasks: frozenset[str]
    fence: tuple[str, ...] = ()  # the silent owners' sink transactional ids


@dataclass(frozen=True)
class DropTasks:
    """Stop ``tasks`` at once, publishing nothing more of them: the group took their
    partitions from this worker (``released``), or another worker adopted them (this one
    was silent), and a snapshot of theirs taken here now would be
    uploaded where the adopter's goes (docs/design.md §6.8)."""

    tasks: frozenset[str]
    # The group took their partitions from this worker (a join, §6.8): it released them,
    # once the publication in flight is out (it may hold their offsets).
    released: bool = False


@dataclass(frozen=True)
class CommitSinks:
    """Checkpoint ``checkpoint_id`` completed: every task publishes its sinks' output."""

    checkpoint_id: int


@dataclass(frozen=True)
class Exit:
    """Stop the worker with ``code`` (0: done, 1: the job failed), for ``reason``."""

    code: int
    reason: str


WorkerCommand = (
    Send
    | RestoreTasks
    | StopTasks
    | ResumeTasks
    | TriggerTasks
    | ReleaseTasks
    | AdoptTasks
    | DropTasks
    | CommitSinks
    | RefusePlan
    | Exit
)
