"""A worker's request to adopt the tasks the group gave it (cooperative assignment,
docs/design.md §6.8), repeated until the coordinator answers: a request read by a
coordinator that stopped — the one hosted by the worker that left, whose leave gave the
partitions away — is read by no other (a starting coordinator does not act on the
requests in the history it reads). Pure."""

from __future__ import annotations

from kstream.protocol.commands import Send
from kstream.protocol.messages import AdoptRequest

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
