"""Savepoints the coordinator was asked for: each is made of the first checkpoint
triggered after the request (docs/decisions.md, "Savepoints are made by the
coordinator"). Pure: it says what to do; the coordinator sends and executes it."""

from __future__ import annotations

import logging

from kstream.protocol.messages import SavepointRequest

log = logging.getLogger(__name__)


class SavepointRequests:
    """At most one savepoint pending: the request and the newest checkpoint id triggered
    before it (its savepoint is the first completion above that)."""

    def __init__(self) -> None:
        self.pending: SavepointRequest | None = None
        self._after = 0

    def request(self, msg: SavepointRequest, running: bool, phase: str, last_id: int) -> bool:
        """Take ``msg`` unless the job is not ``running`` or another savepoint is pending
        (refusals are logged); ``last_id``: the newest checkpoint id triggered so far."""
        if not running or self.pending is not None:
            busy = "another savepoint is pending" if self.pending else f"job {phase}"
            log.warning("savepoint %s from %s refused: %s", msg.name, msg.requester, busy)
            return False
        self.pending, self._after = msg, last_id
        log.info(
            "savepoint %s requested by %s%s",
            msg.name,
            msg.requester,
            " (then stop)" if msg.stop else "",
        )
        return True

    def due(self, checkpoint_id: int) -> SavepointRequest | None:
        """The savepoint completed checkpoint ``checkpoint_id`` makes (and forgets), if any."""
        sp = self.pending
        if sp is None or checkpoint_id <= self._after:
            return None
        self.pending = None
        return sp
