"""A cooperative worker's pulse: ``Pulse(member)`` written every ``PULSE_S`` by a thread of
its own (docs/design.md §6.8).

The coordinator carries a silent worker's tasks so that checkpoints complete without it
(:mod:`kstream.protocol.carrying`), and a checkpoint in flight when a worker is killed
waits for that. Heartbeats come from the processing loop, which may spend up to about a
second on one batch (:mod:`kstream.worker.backlog`) — so the silence that counts as
death had to be several seconds. The pulse says only that the process lives, from a
thread the loop's work does not hold up; a frozen or killed process stops it, and its
tasks are carried after ``PULSED_CARRY_S`` (1 s). A loop that hangs while its process
lives is still found by its missing heartbeats (the heartbeat timeout).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kstream.protocol.messages import Message, Pulse

log = logging.getLogger(__name__)

PULSE_S = 0.25


class PulseThread:
    """Writes ``Pulse(member)`` every ``every`` seconds once ``member`` is known, until
    closed; ``send`` must be safe to call from another thread (``ControlClient.pulse``)."""

    def __init__(self, send: Callable[[Message], object], every: float = PULSE_S) -> None:
        self.member = ""  # set by the loop once the group gave it a member id
        self._send = send
        self._every = every
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kstream-pulse", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._done.wait(self._every):
            member = self.member
            if not member:
                continue
            try:
                self._send(Pulse(member))
            except Exception as e:  # (the loop's own writes report an outage)
                log.debug("pulse not written: %s", e)

    def close(self) -> None:
        self._done.set()
        if self._thread.is_alive():
            self._thread.join()
