"""Which worker answers for a task now: a pure state machine fed the control topic.

Every worker reads ``<app>.control``; from it the directory learns the coordinator's
assignment (``Resume(attempt, owners)``: one member per task), when the job is
moving (a ``Restore`` of a newer attempt: every task is being restored until its
``Resume``), each member's query endpoint (in its ``Heartbeat``) and the newest
completed checkpoint. :meth:`Directory.route` decides, for a task: answer here, forward
to its owner (once: a forwarded query is never forwarded again), or say it is moving
(HTTP 503 with Retry-After) — never an answer from a worker that no longer runs it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from kstream.protocol.batching import ResumeParts
from kstream.protocol.messages import (
    CheckpointCompleted,
    Heartbeat,
    Message,
    Restore,
    Resume,
)

RETRY_AFTER_MS = 500
"""What a "moving" answer asks the client to wait: a restore takes about this long."""


@dataclass(frozen=True)
class Local:
    """Answer from this worker's running task."""

    task: str


@dataclass(frozen=True)
class Forward:
    """Ask ``member`` at ``url``: it runs the task."""

    task: str
    member: str
    url: str


@dataclass(frozen=True)
class Moving:
    """No worker can answer for the task now; ask again after ``retry_after_ms``."""

    task: str
    reason: str
    retry_after_ms: int = RETRY_AFTER_MS


Route = Local | Forward | Moving


@dataclass
class Directory:
    """This worker's view of who runs what (module doc). ``me``: this worker's member
    id, as the coordinator's ``owners`` name it (told by :meth:`joined`)."""

    me: str = ""
    attempt: int = 0
    restoring: bool = False
    owners: dict[str, str] = field(default_factory=dict)
    endpoints: dict[str, str] = field(default_factory=dict)  # member -> query URL
    completed: int | None = None  # newest checkpoint completed (as announced)
    coordinated: bool = True  # False without a coordinator (unchecked, bounded runs)
    _resumes: ResumeParts = field(default_factory=ResumeParts, repr=False, compare=False)

    def joined(self, member: str) -> None:
        """This worker is ``member`` in the group now (a rejoin gives a new id)."""
        self.me = member

    def learn(self, history: Iterable[Message]) -> None:
        for msg in history:
            self.observe(msg)

    def observe(self, msg: Message) -> None:
        """One control message, in topic order."""
        if isinstance(msg, Resume):
            whole = self._resumes.add(msg)
            if whole is None:
                return  # more parts to come
            msg = whole
        if isinstance(msg, Restore) and msg.attempt > self.attempt:
            self.attempt, self.restoring = msg.attempt, True
        elif isinstance(msg, Resume) and msg.attempt >= self.attempt:
            self.attempt, self.restoring, self.owners = msg.attempt, False, dict(msg.owners)
        elif isinstance(msg, Heartbeat) and msg.query:
            self.endpoints[msg.member] = msg.query
        elif isinstance(msg, CheckpointCompleted) and (
            self.completed is None or msg.checkpoint_id > self.completed
        ):
            self.completed = msg.checkpoint_id

    def route(self, task: str, running_here: bool, *, forwarded: bool) -> Route:
        """Where a query for ``task`` is answered (module doc). ``running_here``: this
        worker runs the task now (checked again where it is answered)."""
        if not self.coordinated:
            if running_here:
                return Local(task)
            return Moving(task, "this worker does not run the task (no coordinator: no routing)")
        if self.restoring:
            return Moving(task, f"the job is restoring (attempt {self.attempt})")
        owner = self.owners.get(task)
        if running_here and owner == self.me:
            return Local(task)
        if owner is None:
            return Moving(task, f"no worker runs task {task} in attempt {self.attempt}")
        if owner == self.me:
            return Moving(task, f"task {task} is assigned here but not running yet")
        if forwarded:
            return Moving(task, f"task {task} moved to {owner}")
        url = self.endpoints.get(owner)
        if url is None:
            return Moving(task, f"the query endpoint of {owner} (runs {task}) is not known yet")
        return Forward(task, owner, url)
