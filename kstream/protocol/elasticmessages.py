"""The control messages of cooperative assignment (docs/design.md §6.8): a worker's request
to adopt tasks and the coordinator's answer, a worker's release of tasks the group took
from it, a worker's pulse and
the coordinator host's. Part of the control protocol's messages
(:mod:`kstream.protocol.messages`, which encodes and decodes them with the others)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Pulse:
    """Worker → coordinator, with cooperative assignment (docs/design.md §6.8): ``member``'s
    process lives. Written by a thread of its own several times a second, whatever its
    loop is busy with, so that a killed worker's tasks are carried within a second
    (:mod:`kstream.protocol.carrying`); its heartbeats still say what it runs."""

    member: str


@dataclass(frozen=True)
class CoordinatorPulse:
    """The elected coordinator's host → the other candidates, with cooperative assignment
    (docs/design.md §6.8, "the coordinator's host killed"): the process of worker
    ``member`` hosts the job's coordinator (``running``), or no longer does (its last one).
    Written several times a second by a thread of the election, so that the others see
    within seconds that the host died, and one of them takes the coordinator over
    (:mod:`kstream.protocol.takeover`) before the election group's session expires."""

    member: str
    running: bool


@dataclass(frozen=True)
class AdoptRequest:
    """Worker → coordinator, with cooperative assignment (docs/design.md §6.8): the group
    gave ``member`` the partitions of ``tasks`` in ``generation`` and took none of the
    tasks it runs in ``attempt``; it asks to adopt them while its own run on."""

    member: str
    attempt: int
    generation: int
    tasks: tuple[str, ...]


@dataclass(frozen=True)
class TasksReleased:
    """Worker → coordinator, with cooperative assignment (docs/design.md §6.8): the group
    took the partitions of ``tasks`` from ``member`` in ``generation`` (another member
    joined), and it stopped them, keeping its other tasks running in ``attempt``. Written
    before this member rejoins the group, so before the partitions' new owner can ask to
    adopt them: the tasks are carried at their latest completed snapshots until it does."""

    member: str
    attempt: int
    generation: int
    tasks: tuple[str, ...]


RELEASED_BY = "released by "
"""How the coordinator names the owner of tasks a live worker released (no worker: they
are carried until adopted; a failover if nobody adopts them in time)."""


def released_by(member: str) -> str:
    """The owner the coordinator names for the tasks ``member`` released."""
    return RELEASED_BY + member


@dataclass(frozen=True)
class Adopt:
    """Coordinator → ``member``: restore ``tasks`` from completed checkpoint
    ``checkpoint_id`` and run them in ``attempt`` (their owner left or fell silent and their
    snapshots were carried: :mod:`kstream.protocol.adoption`); every other task runs on.
    ``checkpoint_id`` None: no checkpoint had completed, they start afresh (empty state,
    the start positions)."""

    attempt: int
    member: str
    checkpoint_id: int | None
    tasks: tuple[str, ...]
    # The silent owners' sink transactional ids: fenced first, which aborts a
    # publication they left open (it would hold the tasks' offsets up to its timeout).
    fence: tuple[str, ...] = ()
