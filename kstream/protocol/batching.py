"""Control messages that grow with the tasks, kept one per worker or under the size limit
(issue 41: hundreds of tasks per worker, thousands per job). Pure.

* A worker's acknowledgements: one ``AcknowledgeCheckpoints`` per checkpoint carrying all
  its tasks' snapshots (:func:`batch`), not one message per task: the coordinator reads
  a message per worker.
* ``Resume``'s owners (one member per task: ~60 bytes a task, over the limit past a few
  thousand tasks) in parts (:func:`resume_parts`), written in one transaction, each
  under ``MAX_MESSAGE_BYTES``; readers put them together with :class:`ResumeParts`.

A message over the limit is split into as many equal parts as its size asks for (with a
tenth to spare), each under the limit: the parts are few, and a small job's message is one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any, TypeVar

from kstream.checkpointstorage.metadata import TaskSnapshot
from kstream.protocol.messages import (
    MAX_MESSAGE_BYTES,
    AcknowledgeCheckpoint,
    AcknowledgeCheckpoints,
    Message,
    Resume,
    TaskReady,
    TasksReady,
    dump,
    encode,
)

V = TypeVar("V")
_WIDEST = 10**9  # a part number as wide as any, when a part's size is checked


def batch(acks: Iterable[AcknowledgeCheckpoint], member: str) -> list[AcknowledgeCheckpoints]:
    """``acks`` (``member``'s tasks') as one message per checkpoint and attempt, in the
    order of their first ack, each under the size limit."""
    groups: dict[tuple[int, int], dict[str, TaskSnapshot]] = {}
    for ack in acks:
        groups.setdefault((ack.checkpoint_id, ack.attempt), {})[ack.task_id] = ack.snapshot
    out: list[AcknowledgeCheckpoints] = []
    for (n, attempt), snapshots in groups.items():
        make = partial(AcknowledgeCheckpoints, n, attempt, member)
        out += [make(s) for s in _fitting(snapshots, make)]
    return out


def readies(
    attempt: int, tasks: Iterable[str], member: str, generation: int, plan: str
) -> list[TasksReady]:
    """``member``'s ``tasks`` ready for ``attempt``: one message, in parts only past the limit."""
    make = partial(_ready, attempt, member, generation, plan)
    return [make(chunk) for chunk in _fitting(dict.fromkeys(tasks), make)]


def _ready(
    attempt: int, member: str, generation: int, plan: str, tasks: dict[str, None]
) -> TasksReady:
    return TasksReady(attempt, tuple(tasks), member, generation, plan)


def each_ready(msg: TaskReady | TasksReady) -> list[TaskReady]:
    """A task's readiness, or each task's in a worker's message."""
    if isinstance(msg, TaskReady):
        return [msg]
    return [TaskReady(msg.attempt, t, msg.member, msg.generation, msg.plan) for t in msg.tasks]


def resume_parts(attempt: int, owners: dict[str, str]) -> list[Resume]:
    """``Resume(attempt, owners)`` as one message, or in parts when it is over the limit."""
    chunks = _fitting(owners, lambda o: Resume(attempt, o, _WIDEST, _WIDEST))
    if len(chunks) == 1:
        return [Resume(attempt, owners)]
    return [Resume(attempt, o, k, len(chunks)) for k, o in enumerate(chunks)]


class ResumeParts:
    """Puts a ``Resume`` written in parts together: ``add`` returns the whole ``Resume``
    once every part of its attempt was read (a one-part message at once), else None."""

    def __init__(self) -> None:
        self._attempt: int | None = None
        self._owners: dict[str, str] = {}
        self._parts: set[int] = set()

    def add(self, msg: Resume) -> Resume | None:
        if msg.parts <= 1:
            self._attempt = None
            return msg
        if msg.attempt != self._attempt:  # (a newer attempt's parts replace an older's)
            self._attempt, self._owners, self._parts = msg.attempt, {}, set()
        self._owners.update(msg.owners)
        self._parts.add(msg.part)
        if len(self._parts) < msg.parts:
            return None
        whole = Resume(msg.attempt, self._owners)
        self._attempt, self._owners, self._parts = None, {}, set()
        return whole

    def whole(self, msg: Message) -> Message | None:
        """``msg``, or for a part of a ``Resume`` the whole once complete (None before)."""
        return self.add(msg) if isinstance(msg, Resume) else msg


def _fitting(items: dict[str, V], make: Callable[[dict[str, V]], Any]) -> list[dict[str, V]]:
    """``items`` whole if ``make(items)`` encodes under the limit, else in as many equal
    chunks (in key order) as its size asks for with a tenth to spare, each split again
    if still over (one encoding of the whole, one of each chunk: linear)."""
    size = len(dump(make(items)))
    if size <= MAX_MESSAGE_BYTES:
        return [items]
    if len(items) <= 1:
        encode(make(items))  # ProtocolError: one task's entry alone is over the limit
    ordered = sorted(items.items())
    k = max(2, math.ceil(size / (MAX_MESSAGE_BYTES * 0.9)))
    step = math.ceil(len(ordered) / k)
    return [
        part
        for i in range(0, len(ordered), step)
        for part in _fitting(dict(ordered[i : i + step]), make)
    ]
