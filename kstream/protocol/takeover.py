"""When a candidate takes the coordinator over from a silent host: a pure state machine
(docs/design.md §6.8, "the coordinator's host killed").

The coordinator elected among workers (:mod:`kstream.protocol.election`) moves when the
election group gives its partition to another member — after its host's session expired
(6 s) when the host was killed. Every task of the job waits meanwhile: nobody triggers
checkpoints, so nothing is published. With cooperative assignment every worker pulses
(``Pulse``, every 0.25 s) and the host's election writes ``CoordinatorPulse`` as often, so
a candidate can see sooner that the host died — neither pulse, nor a coordinator's
message (only a live, unfenced coordinator commits one), for a while — and start a
coordinator itself: the fixed
transactional id it starts with fences the old one, whatever it was doing, so two never
write at once (a false alarm costs a move of the coordinator, never a double write).

:class:`HostWatch` is fed the control topic's pulses and coordinator messages in their
order, by a reader of the candidate's own that also reads open transactions (a killed
coordinator's open transaction holds every read_committed reader until it is fenced, so
such a reader would see no silence at all). Its clock is this worker's *own* pulses read since the host's last one:
the topic's order is the writers' order, so a reader that was busy for a second (and then
reads a burst) does not see a silence that was not there, and a candidate whose own
process stalled counts nothing. The candidates take over in a line, to spare the job
several moves: the worker with the smallest member id among those pulsing takes over
after ``silence`` of its pulses (1.5 s), the next after twice that, and so on; the one that
does pulses as the host, which ends the others' count.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kstream.protocol.elasticmessages import CoordinatorPulse, Pulse
from kstream.protocol.signing import COORDINATOR_MESSAGES

#: How many of this worker's own pulses (0.25 s apart) read since the host's last one make
#: the host silent: 1.5 s — longer than a pulse thread's usual stall on a busy machine, and
#: short against the election group's session (6 s).
SILENCE_PULSES = 6


@dataclass
class HostWatch:
    """Pulses in (this worker's member id ``me``), "take over now" out."""

    me: str = ""
    silence: int = SILENCE_PULSES
    every: float = 0.25  # s between two pulses of a worker (kstream.worker.pulse.PULSE_S)
    host: str | None = None  # the member whose process hosts the coordinator, by its pulses
    _count: int = 0  # this worker's pulses read so far
    _host_at: int = 0  # ... when the host's last CoordinatorPulse was read
    _seen: dict[str, int] = field(default_factory=dict)  # other workers: _count at their pulse
    _fired: bool = False  # took over from this host's silence already

    def observe(self, msg: object) -> bool:
        """Feed one control message; True: this candidate should take the coordinator over."""
        match msg:
            case CoordinatorPulse() if self._count == 0:
                pass  # history (before this worker's first pulse): a live host pulses again
            case CoordinatorPulse(member=member, running=True):
                self.host, self._host_at, self._fired = member, self._count, False
            case CoordinatorPulse(member=member) if member == self.host:
                self.host = None  # it stepped down: the election group elects the next
            case Pulse(member=member) if member != self.me or not self.me:
                self._seen[member] = self._count
                if member == self.host:  # its process lives (its worker's own thread)
                    self._host_at = self._count
            case _ if isinstance(msg, COORDINATOR_MESSAGES) and self.host != self.me:
                self._host_at = self._count  # a coordinator writes (fenced ones cannot)
            case Pulse():
                self._count += 1
                return self._due()
        return False

    def other_host(self, live: bool = True) -> bool:
        """Whether another process hosts the coordinator and has not stepped down — and,
        with ``live``, has not been silent (an elected candidate defers to a live one
        instead of fencing it, and then goes on deferring until it steps down or this
        watch says to take over, in line with the other candidates: :class:`Election`)."""
        if self.host is None or self.host == self.me:
            return False
        return not live or self._count - self._host_at < self.silence

    def silent(self) -> dict[str, float]:
        """The workers silent for ``silence`` or longer, with their silence in seconds (by
        this worker's pulses): a coordinator taking over judges them silent from its start,
        instead of counting them as having pulsed then (``Membership.expect_pulses``)."""
        return {
            member: (self._count - at) * self.every
            for member, at in self._seen.items()
            if self._count - at >= self.silence
        }

    def _due(self) -> bool:
        if self.host is None or self.host == self.me or self._fired:
            return False
        alive = self._count - self.silence
        for member, at in list(self._seen.items()):
            if at < alive - self.silence:
                del self._seen[member]  # long gone: stays out of the line
        rank = sum(
            1
            for member, at in self._seen.items()
            if member < self.me and member != self.host and at >= alive
        )
        if self._count - self._host_at < self.silence * (1 + rank):
            return False
        self._fired = True
        return True
