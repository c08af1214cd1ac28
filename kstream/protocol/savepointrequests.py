"""Savepoints the coordinator was asked for: each is made of the first checkpoint
triggered after the request (docs/decisions.md, "Savepoints are made by the
coordinator"). Pure: it says what to do; the coordinator sends and executes it."""

from __future__ import annotations

import logging

from kstream.protocol.messages import SavepointRequest

log = logging.getLogger(__name__)


class SavepointRequests:
    """At most one savepoint pending: the request and the newest checkpoint id triggered
    before it (its savepoint is the first completion above that).

    A request that comes while the job restores (a failover, a first start) waits for
    the job to run again: ``resumed`` hands it back then, to be started as if it came
    at that moment. Refused, it left ``kstream savepoint`` waiting out its timeout with
    the reason only in the coordinator's log (the probable cause of a CI failure, "no
    savepoint within 90s", on a loaded machine). So does a request started in an
    attempt the job then failed over from: its ``StopJob`` was of that attempt."""

    def __init__(self) -> None:
        self.pending: SavepointRequest | None = None
        self._after = 0
        self._waiting = False  # the pending request waits for the job to run
        self._attempt: int | None = None  # the attempt it was started in

    def request(self, msg: SavepointRequest, phase: str, last_id: int, attempt: int) -> bool:
        """Take ``msg`` unless another savepoint is pending or the job failed or stopped
        (refusals are logged); True when it starts now (the job runs), False also when it
        waits for the restore to end. ``last_id``: the newest checkpoint id triggered."""
        if self.pending is not None or phase in ("failed", "stopped"):
            busy = "another savepoint is pending" if self.pending else f"job {phase}"
            log.warning("savepoint %s from %s refused: %s", msg.name, msg.requester, busy)
            return False
        self.pending, self._after = msg, last_id
        self._waiting = phase != "running"
        self._attempt = None if self._waiting else attempt
        log.info(
            "savepoint %s requested by %s%s%s",
            msg.name,
            msg.requester,
            " (then stop)" if msg.stop else "",
            f"; the job is {phase}: made once it runs again" if self._waiting else "",
        )
        return not self._waiting

    def resumed(self, last_id: int, attempt: int) -> SavepointRequest | None:
        """The job runs again in ``attempt``: the request to start (again) now, if any —
        one that waited for it, or one started in an earlier attempt (its savepoint is
        the first completion above ``last_id``)."""
        if self.pending is None or (not self._waiting and self._attempt == attempt):
            return None
        self._waiting, self._after, self._attempt = False, last_id, attempt
        return self.pending

    def due(self, checkpoint_id: int) -> SavepointRequest | None:
        """The savepoint completed checkpoint ``checkpoint_id`` makes (and forgets), if any."""
        sp = self.pending
        if sp is None or self._waiting or checkpoint_id <= self._after:
            return None
        self.pending = None
        return sp
