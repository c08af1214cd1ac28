"""The worker's side of adoption (cooperative assignment, docs/design.md §6.8; a base
class of :class:`kstream.protocol.worker.WorkerProtocol`): when it asks to adopt the
tasks the group gave it, what it does with an ``Adopt`` of its own or of another worker,
and its request, repeated until the coordinator answers — a request read by a
coordinator that stopped (the one hosted by the worker that left, whose leave gave the
partitions away) is read by no other: a starting coordinator does not act on the
requests in the history it reads. Pure."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from kstream.protocol.commands import Send
from kstream.protocol.messages import Adopt, AdoptRequest, TasksReleased
from kstream.protocol.workerevents import AdoptTasks, Assigned, DropTasks, WorkerCommand

log = logging.getLogger(__name__)

ASK_EVERY_S = 1.0


class AdoptRequests:
    """The request not answered yet, and when to send it again."""

    def __init__(self) -> None:
        self.pending: AdoptRequest | None = None
        self._next = 0.0

    def ask(self, request: AdoptRequest, now: float) -> list[Send]:
        """Ask (the request replaces any earlier one: a new assignment came)."""
        self.pending, self._next = request, now + ASK_EVERY_S
        return [Send(request)]

    def answered(self, tasks: frozenset[str]) -> None:
        """An ``Adopt`` of ``tasks`` for this worker came."""
        if self.pending is not None and set(self.pending.tasks) <= tasks:
            self.pending = None

    def clear(self) -> None:
        """A new assignment or a restore: nothing to ask for any more."""
        self.pending = None

    def due(self, now: float) -> list[Send]:
        """The request again, once a second while no answer came."""
        if self.pending is None or now < self._next:
            return []
        self._next = now + ASK_EVERY_S
        return [Send(self.pending)]


class WorkerAdoption:
    """What a worker does about adoptions (see the module); its protocol's state."""

    cooperative: bool
    attempt: int
    restoring: bool
    hold: tuple[int, float] | None
    member: str
    generation: int | None
    assigned: tuple[str, ...]
    tasks: set[str]
    running: set[str]
    _adoption: AdoptRequests
    _next_heartbeat: float
    _released: set[str]  # released in a revocation, stopped at the next Assigned
    awaiting_first_output: bool

    @property
    def stopping(self) -> bool:
        raise NotImplementedError

    def _heartbeat(self, now: float) -> list[WorkerCommand]:
        raise NotImplementedError

    def _runs_on(self) -> bool:
        """Whether a cooperative change of this worker's partitions leaves its tasks
        running: resumed, no hold, every task it holds running."""
        return (
            self.cooperative
            and self.attempt > 0
            and not self.restoring
            and self.hold is None
            and self.tasks == self.running
        )

    def _adopts(self, event: Assigned) -> bool:
        """Whether this assignment only gives partitions to a worker running its tasks (they
        run on; it asks to adopt the new ones, unless it is stopping), cooperatively."""
        return self._runs_on() and self.running <= set(event.tasks)

    def _ask_adoption(self, event: Assigned, now: float) -> list[Send]:
        return self._ask(set(event.tasks) - self.tasks, event.generation, now)

    def _ask(self, tasks: set[str], generation: int | None, now: float) -> list[Send]:
        """Ask to adopt ``tasks`` (none, or stopping: nothing to ask)."""
        if not tasks or self.stopping:
            return []
        request = AdoptRequest(self.member, self.attempt, generation or 0, tuple(sorted(tasks)))
        return self._adoption.ask(request, now)

    def _releases_restored(self) -> bool:
        """Whether a cooperative change of this worker's partitions during its restore
        releases the tasks it loses: their readiness may already have made the
        coordinator name it their owner in a ``Resume`` it has not read yet (workers
        that start together join one after the other), and their new owner then asks to
        adopt them."""
        return self.cooperative and self.attempt > 0 and self.restoring and self.hold is None

    def _ask_unowned(self, tasks: set[str], now: float) -> list[Send]:
        """At the ``Resume``: ``tasks`` this worker holds the partitions of were readied by
        the member the group took them from, before this worker was given them (workers
        that start together join one after the other); cooperatively, it asks to adopt
        them — that member released them (the coordinator answers ``Adopt``) or the
        coordinator restores."""
        return self._ask(tasks, self.generation, now) if self.cooperative else []

    def release(self, remaining: Iterable[str], generation: int | None) -> TasksReleased | None:
        """Inside the group's revocation, before this member rejoins: the tasks whose
        partitions the group took (another member joined), if this worker runs on with
        the others — cooperatively, resumed, no hold, not stopping — or restores them
        (cooperatively, no hold, not stopping: :meth:`_releases_restored`). They are
        stopped at the ``Assigned`` that follows (``DropTasks``); the message returned
        must be written before the callback returns, so that it precedes the new owner's
        request to adopt them. None: not a release (the ``Assigned`` decides as before)."""
        if self._releases_restored() and not self.stopping:
            lost = self.tasks - set(remaining)
            if not lost:
                return None
            self.tasks -= lost
            self._released |= lost
            log.info(
                "releasing %s during the restore: the group gave their partitions to another "
                "member",
                sorted(lost),
            )
            return TasksReleased(self.member, self.attempt, generation or 0, tuple(sorted(lost)))
        lost = self.running - set(remaining)
        if not lost or self.stopping or not self._runs_on():
            return None
        self.tasks, self.running = self.tasks - lost, self.running - lost
        self._released |= lost
        log.info("releasing %s: the group gave their partitions to another member", sorted(lost))
        return TasksReleased(self.member, self.attempt, generation or 0, tuple(sorted(lost)))

    def _take_released(self) -> list[WorkerCommand]:
        """The tasks released since the last assignment, stopped now."""
        released, self._released = self._released, set()
        return [DropTasks(frozenset(released), released=True)] if released else []

    def _on_adopt(self, event: Adopt, now: float) -> list[WorkerCommand]:
        """An ``Adopt`` of this attempt: ours, the tasks run here from their carried
        snapshots; another's naming tasks this worker runs, it was silent (a zombie) and
        stops them before any trigger written after it (their snapshot would go where the
        adopter's goes)."""
        if event.member != self.member:
            lost = frozenset(event.tasks) & self.tasks
            if not lost:
                return []
            self.tasks, self.running = self.tasks - lost, self.running - lost
            return [DropTasks(lost)]
        if self.restoring or self.stopping:
            return []
        self._adoption.answered(frozenset(event.tasks))
        tasks = frozenset(event.tasks).intersection(self.assigned) - self.tasks
        if not tasks:
            return []  # (the group took them again meanwhile: the coordinator restores)
        start = event.checkpoint_id
        log.info(
            "adopting %s from %s",
            ", ".join(sorted(tasks)),
            "the start positions" if start is None else f"checkpoint {start}",
        )
        self.tasks |= tasks
        self.running |= tasks
        self.awaiting_first_output = True  # (their output published without an interval)
        self._next_heartbeat = 0.0
        adopt = AdoptTasks(self.attempt, event.checkpoint_id, tasks, event.fence)
        return [adopt, *self._heartbeat(now)]
