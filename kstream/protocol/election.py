"""Which worker hosts the coordinator: a pure state machine (docs/design.md §12, "many hosts").

Every worker started with ``--coordinator auto`` is a candidate. Candidates are the
members of the consumer group ``<app>.coordinator`` subscribed to the one-partition
topic ``<app>.coordinator-election``; the member Kafka assigns that partition is
elected. Kafka guarantees at most one owner of a partition per group generation;
the coordinator's fixed ``transactional.id`` closes the remaining gap (a member that
lost its session without hearing of it, e.g. behind a cut link): the next elected
coordinator's ``init_transactions`` fences it, so exactly one writes at a time.

:class:`Election` turns membership events into commands; the runner
(:mod:`kstream.hosting.election`) feeds it and executes them. Rules:

1. assigned the partition → start the coordinator (unless one still runs: it is
   stopped first; the new one starts once the old one exited);
2. revoked or lost → stop the coordinator, and on revocation wait for it to exit
   before the partition goes to the next member (a clean hand-over);
3. the coordinator exited while still elected: exit code 1 after being fenced means
   another coordinator took over (stand by: a rebalance follows); a job failure
   (the coordinator wrote ``JobFailed``) ends the election — the workers stop too;
   Kafka or the store being unavailable restarts it after ``restart_delay``, doubled
   after each further such exit (at most ``max_restart_delay``);
4. with cooperative assignment, a candidate whose :class:`kstream.protocol.takeover.HostWatch`
   finds the host silent takes the coordinator over (``take_over``) without waiting for
   the election group: ACTING until the group elects it, or until another coordinator
   fences it (then it stands by); an elected candidate that hears another live host
   (``other_host``) waits instead of fencing it, and starts once that host stepped down,
   or takes over when its watch says so (in line with the others, when the host falls
   silent).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class ElectionPhase(enum.Enum):
    """Where this candidate stands."""

    STANDBY = "standby"  # not elected
    ELECTED = "elected"  # elected, coordinator running (or about to start)
    ACTING = "acting"  # not elected, but took over from a silent host (rule 4)
    FENCED = "fenced"  # elected, but another coordinator fenced ours: waits for a rebalance
    DONE = "done"  # the job failed hard or we stop: no more coordinating


class Outcome(enum.Enum):
    """How a coordinator run ended (from its exit code)."""

    STOPPED = 0  # on request, or nothing to coordinate
    JOB_FAILED = 1  # it wrote JobFailed: the job is over
    FENCED = 3  # another coordinator took over
    UNAVAILABLE = 4  # Kafka or the store failed it: try again


class ElectionCommand(enum.Enum):
    """What the runner must do."""

    START = "start"
    STOP = "stop"


@dataclass
class Election:
    """Membership events in, coordinator commands out; times are seconds."""

    restart_delay: float = 1.0
    phase: ElectionPhase = ElectionPhase.STANDBY
    running: bool = False  # a coordinator thread of ours is alive
    elections: int = 0  # how often this candidate was elected
    _restart_at: float | None = None
    _stopping: bool = False  # we asked our coordinator to stop: its exit says nothing
    _unavailable: int = 0  # successive UNAVAILABLE exits: the restart delay doubles
    _deferred: bool = False  # elected while another live host coordinates (rule 4)
    max_restart_delay: float = 10.0

    @property
    def hosting(self) -> bool:
        """Whether this candidate runs the coordinator (or restarts it): what its
        ``CoordinatorPulse`` says."""
        acting = self.phase in (ElectionPhase.ELECTED, ElectionPhase.ACTING)
        return acting and not self._deferred

    def assigned(
        self, elected: bool, now: float, other_host: bool = False
    ) -> list[ElectionCommand]:
        """A rebalance gave us the partition (``elected``) or not; ``other_host``: another
        live process hosts a coordinator (rule 4)."""
        if not elected:
            return self.revoked(now)
        if self.phase in (ElectionPhase.ELECTED, ElectionPhase.DONE):
            return []
        self.elections += 1
        if self.phase is ElectionPhase.ACTING:  # the group now says what we did already
            self.phase = ElectionPhase.ELECTED
            return []
        self.phase = ElectionPhase.ELECTED
        self._restart_at = None
        self._unavailable = 0
        self._deferred = other_host
        return self.tick(now, other_host)

    def take_over(self, now: float) -> list[ElectionCommand]:
        """The host went silent (rule 4): start a coordinator now, elected or not."""
        if self.phase is ElectionPhase.DONE or self.running:
            return []
        if self.phase in (ElectionPhase.STANDBY, ElectionPhase.ACTING):
            self.phase = ElectionPhase.ACTING
        else:  # elected: deferred, fenced, or waiting to restart
            self.phase = ElectionPhase.ELECTED
        self._deferred = False
        self._restart_at = None
        return self.tick(now)

    def revoked(self, now: float) -> list[ElectionCommand]:
        """The partition was revoked or lost: stop coordinating at once."""
        if self.phase is not ElectionPhase.DONE:
            self.phase = ElectionPhase.STANDBY
        self._restart_at = None
        self._deferred = False
        return self._stop_running()

    def exited(self, outcome: Outcome, now: float) -> list[ElectionCommand]:
        """Our coordinator ended with ``outcome`` (rule 3)."""
        self.running = False
        if self._stopping or self.phase not in (ElectionPhase.ELECTED, ElectionPhase.ACTING):
            self._stopping = False
            return []
        if outcome in (Outcome.STOPPED, Outcome.JOB_FAILED):
            self.phase = ElectionPhase.DONE
        elif outcome is Outcome.FENCED and self.phase is ElectionPhase.ACTING:
            self.phase = ElectionPhase.STANDBY  # another took over: not ours to restart
        elif outcome is Outcome.FENCED:
            self.phase = ElectionPhase.FENCED
        else:
            delay = min(self.restart_delay * 2**self._unavailable, self.max_restart_delay)
            self._unavailable += 1
            self._restart_at = now + delay
        return []

    def tick(self, now: float, other_host: bool = False) -> list[ElectionCommand]:
        """Start the coordinator when elected (or acting) and none of ours runs (a restart
        once due); an elected candidate that deferred to ``other_host`` waits while it lives."""
        if self.phase not in (ElectionPhase.ELECTED, ElectionPhase.ACTING) or self.running:
            return []
        if self._deferred and other_host:
            return []
        self._deferred = False
        if self._restart_at is not None and now < self._restart_at:
            return []
        self._restart_at = None
        self.running = True
        return [ElectionCommand.START]

    def stop(self) -> list[ElectionCommand]:
        """This process stops: no more coordinating."""
        self.phase = ElectionPhase.DONE
        return self._stop_running()

    def _stop_running(self) -> list[ElectionCommand]:
        if not self.running or self._stopping:
            return []
        self._stopping = True
        return [ElectionCommand.STOP]
