"""Failover: suspend → ``Restore(attempt)`` → every ``TaskReady`` → ``Resume(owners)`` (docs/design.md §6).

The restart strategy (:class:`kstream.config.RestartStrategy`) spaces and bounds it:
exponential delay by default, fixed count with ``max_restarts``; a restore not
finished within ``restore_timeout`` of its start or of its last progress (a worker
heartbeat saying it restored more tasks) starts over with a new attempt (and counts as
a restart).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable
from enum import StrEnum

from kstream.config import RestartStrategy
from kstream.protocol.batching import resume_parts
from kstream.protocol.commands import Command, Fail, Send
from kstream.protocol.messages import JobFailed, JobStopped, Restore, TaskReady
from kstream.protocol.recovery import RecoveredState

log = logging.getLogger(__name__)

JOIN_WAIT_S = 10.0
"""How long a restore waits for a worker that said it joins during it (JOINING) to be in
the group: its join is a rebalance, seen by the others at their next heartbeat (1 s)."""


class JobPhase(StrEnum):
    """Where the job is, as the coordinator sees it."""

    RUNNING = "running"  # tasks run; checkpoints are triggered
    SUSPENDED = "suspended"  # a failure happened; waiting for the restart delay
    RESTORING = "restoring"  # Restore written; collecting TaskReady
    FAILED = "failed"  # hard failure; nothing more happens
    STOPPED = "stopped"  # stopped on request or by its workers; a joining worker restarts it


class FailoverController:
    """Drives the restart of the job after a failure; triggers nothing itself.

    While the phase is not RUNNING the coordinator triggers no checkpoint.
    Only readies of the current attempt and of the newest group generation count;
    a newer generation makes older readies void (those workers re-send theirs).
    """

    def __init__(
        self,
        expected_tasks: frozenset[str],
        strategy: RestartStrategy,
        attempt: int = 0,
        phase: JobPhase = JobPhase.RUNNING,
        *,
        owners: dict[str, str] | None = None,
        plan: str = "",
    ) -> None:
        self.expected = expected_tasks
        self.strategy = strategy
        self.attempt = attempt
        self.phase = phase
        self.generation = -1  # newest consumer-group generation seen
        self._owners: dict[str, str] = dict(owners or {})  # of the attempt's tasks
        self._by_member: dict[str, frozenset[str]] | None = None  # owners, inverted
        self.plan = plan  # the plan fingerprint every Restore carries
        self.restore_point: int | None = None  # the checkpoint of the current restore
        self._ready: dict[str, tuple[str, int]] = {}  # task -> (member, generation)
        # Members that join during the restore (docs/design.md §6.6) -> until when the
        # Resume waits for them to be in the group's newest generation.
        self._joiners: dict[str, float] = {}
        self._restarts: deque[float] = deque()
        self._restore_at = 0.0
        self._backoff = 0.0  # exponential delay: the wait before the latest restart
        self._restore_deadline = 0.0
        self.failure_reason = ""

    def on_failure(self, reason: str, now: float, *, at_once: bool = False) -> list[Command]:
        """A task failed, a worker was lost or the assignment changed: schedule a restart.

        Returns the hard-failure commands when the restart strategy is exhausted.
        ``at_once``: the group changed after a hand-over checkpoint (kstream.protocol.handover):
        restored now, neither delayed nor counted by the restart strategy.
        """
        if self.phase in (JobPhase.FAILED, JobPhase.SUSPENDED):
            return []  # already failed / a restart is already scheduled
        if at_once:
            self.failure_reason = reason
            self.phase = JobPhase.SUSPENDED
            self._restore_at = now
            return []
        if self.strategy.exponential:
            return self._exponential(reason, now)
        assert self.strategy.max_restarts is not None
        while self._restarts and self._restarts[0] <= now - self.strategy.window:
            self._restarts.popleft()
        if len(self._restarts) >= self.strategy.max_restarts:
            return self.fail(
                f"{reason}; restart strategy exhausted: {len(self._restarts)} restarts within "
                f"{self.strategy.window:g}s (max_restarts={self.strategy.max_restarts}) -> job failed"
            )
        # ``delay`` is the least time between two restarts: the first failure after a
        # quiet spell restores at once, a failure loop at most once per ``delay``.
        previous = self._restarts[-1] if self._restarts else None
        self._restarts.append(now)
        self.failure_reason = reason
        self.phase = JobPhase.SUSPENDED
        self._restore_at = now if previous is None else max(now, previous + self.strategy.delay)
        return []

    def _exponential(self, reason: str, now: float) -> list[Command]:
        s = self.strategy
        previous = self._restarts[-1] if self._restarts else None
        if previous is None or now - previous >= s.reset_after:
            self._backoff = 0.0  # a quiet period: restart at once
        elif self._backoff == 0.0:
            self._backoff = s.delay
        else:
            self._backoff = min(s.max_delay, self._backoff * s.multiplier)
        self._restore_at = now if previous is None else max(now, previous + self._backoff)
        self._restarts.clear()
        self._restarts.append(self._restore_at)
        self.failure_reason = reason
        self.phase = JobPhase.SUSPENDED
        return []

    @property
    def restart_delay(self) -> float:
        """Seconds from the failure to the scheduled restore (while SUSPENDED)."""
        return self._backoff

    def continue_from(self, rec: RecoveredState, now: float) -> list[Command]:
        """What a starting coordinator does with the job it recovered: one that was
        running keeps running in its attempt; one that was restoring, failed, stopped,
        or had an unhandled task failure is restored anew."""
        last = rec.last_lifecycle
        if rec.starting_from:
            # Started from an imported checkpoint or savepoint: a first start, whatever
            # the control topic says of the app's previous version.
            return self.schedule_initial_restore(now, rec.starting_from)
        if last is None or isinstance(last, JobStopped):
            # A job that never ran (or started again after a stop, which is a start, not
            # a restart of a failed job): restore every task (to the latest completed
            # checkpoint, or the start positions) and resume with one owner per task, so
            # no worker ever runs a task it was not named the owner of (§6.4).
            return self.schedule_initial_restore(now)
        if isinstance(last, Restore):
            return self.on_failure(
                f"coordinator restarted during the restore of attempt {rec.attempt}", now
            )
        if isinstance(last, JobFailed):
            return self.on_failure(f"coordinator restarted after job failure ({last.reason})", now)
        if rec.unhandled_failure:
            return self.on_failure(rec.unhandled_failure, now)
        return []

    def schedule_initial_restore(self, now: float, reason: str = "job start") -> list[Command]:
        """A job's first start — also from an imported checkpoint or savepoint: restore and
        resume every task now (not counted as a restart)."""
        self.failure_reason = reason
        self.phase = JobPhase.SUSPENDED
        self._restore_at = now
        return []

    def stopped(self) -> None:
        """The job stopped (on request or by its workers): nothing is restored or
        triggered until it starts again (:meth:`start_again`)."""
        self.phase = JobPhase.STOPPED

    def start_again(self, generation: int, now: float) -> list[Command]:
        """A worker of group ``generation`` joined the stopped job (any generation: an
        emptied group may start over at 1): restore every task as at a first start."""
        self.generation = generation
        return self.schedule_initial_restore(now)

    @property
    def owners(self) -> dict[str, str]:
        """The one member per task of the running attempt (replaced, never changed in place)."""
        return self._owners

    @owners.setter
    def owners(self, owners: dict[str, str]) -> None:
        self._owners, self._by_member = owners, None

    def by_member(self) -> dict[str, frozenset[str]]:
        """The owners inverted: member -> the tasks it owns (built once per ``owners``: a
        heartbeat asks for its member's tasks, which a scan of every task's owner made
        O(tasks) per heartbeat, O(workers x tasks) a second)."""
        if self._by_member is None:
            tasks: dict[str, set[str]] = {}
            for task, member in self._owners.items():
                tasks.setdefault(member, set()).add(task)
            self._by_member = {m: frozenset(t) for m, t in tasks.items()}
        return self._by_member

    def fail(self, reason: str) -> list[Command]:
        """Hard failure: tell the workers, then stop the coordinator."""
        self.phase = JobPhase.FAILED
        self.failure_reason = reason
        return [Send(JobFailed(reason)), Fail(reason)]

    def observe_generation(self, generation: int) -> None:
        """A newer group generation voids readies of older generations."""
        if generation > self.generation:
            self.generation = generation
            self._ready = {t: r for t, r in self._ready.items() if r[1] >= generation}

    def tick(self, now: float, restore_point: int | None) -> list[Command]:
        """Start a due restore from ``restore_point``, or start over a restore that took too long."""
        if self.phase is JobPhase.SUSPENDED and now >= self._restore_at:
            self.attempt += 1
            self._ready, self._joiners = {}, {}
            self.phase = JobPhase.RESTORING
            self.restore_point = restore_point
            self._restore_deadline = now + self.strategy.restore_timeout
            return [Send(Restore(self.attempt, restore_point, self.plan))]
        if self.phase is JobPhase.RESTORING and now >= self._restore_deadline:
            missing = ", ".join(sorted(self.expected - self._ready.keys()))
            return self.on_failure(
                f"restore of attempt {self.attempt} not finished within "
                f"{self.strategy.restore_timeout:g}s of its last progress: no TaskReady from "
                f"{missing}",
                now,
            )
        return []

    def progressed(self, now: float) -> None:
        """A worker restored more tasks: the restore in progress moves, so its deadline
        is ``restore_timeout`` from now (a restore of hundreds of tasks per worker takes
        minutes; one that stops moving still starts over)."""
        if self.phase is JobPhase.RESTORING:
            deadline = now + self.strategy.restore_timeout
            self._restore_deadline = max(self._restore_deadline, deadline)

    def on_ready(self, msg: TaskReady) -> list[Command]:
        """Record a ready task; with every task ready, resume with one owner per task."""
        if (
            self.phase is not JobPhase.RESTORING
            or msg.attempt != self.attempt
            or msg.task_id not in self.expected
        ):
            return []
        self.observe_generation(msg.generation)
        if msg.generation < self.generation:
            return []  # stale: that member's assignment has been superseded
        self._ready[msg.task_id] = (msg.member, msg.generation)
        return self._resume_if_ready()

    def unready(self, member: str, tasks: Iterable[str], generation: int) -> None:
        """``member`` released ``tasks`` during this restore (cooperatively, the group gave
        their partitions to another member in a generation after ``generation``): what it
        said of them is void; the ``Resume`` waits for their new owner's ready."""
        for task in tasks:
            ready = self._ready.get(task)
            if ready is not None and ready[0] == member and ready[1] <= generation:
                del self._ready[task]

    def _resume_if_ready(self) -> list[Command]:
        """Every task ready in the newest generation and no joiner awaited: resume."""
        if self._ready.keys() != self.expected or self._joiners:
            return []
        self.owners = {task: member for task, (member, _gen) in sorted(self._ready.items())}
        self.phase = JobPhase.RUNNING
        return [Send(m) for m in resume_parts(self.attempt, dict(self.owners))]

    def expect_joiner(self, member: str, now: float) -> None:
        """``member`` joins the group during this restore: the Resume waits until it is
        in the newest generation (its join's change is then part of this restore, not
        a rollback just after it), for at most JOIN_WAIT_S."""
        if self.phase is JobPhase.RESTORING:
            self._joiners.setdefault(member, now + JOIN_WAIT_S)

    def joiner_heard(self, member: str, generation: int) -> list[Command]:
        """A heartbeat of ``member`` in ``generation`` (already observed): a joiner in
        the newest generation is awaited no more."""
        if self.phase is not JobPhase.RESTORING or member not in self._joiners:
            return []
        if generation < self.generation:
            return []
        del self._joiners[member]
        return self._resume_if_ready()

    def joiners_expired(self, now: float) -> list[Command]:
        """Joiners still not in the group JOIN_WAIT_S after they said they join (gone,
        or never assigned) are awaited no more."""
        late = [m for m, until in self._joiners.items() if now >= until]
        if self.phase is not JobPhase.RESTORING or not late:
            return []
        for m in late:
            del self._joiners[m]
        log.warning("restore: %s did not join within %.0fs; not waited for", late, JOIN_WAIT_S)
        return self._resume_if_ready()

    def forget_readies(self, member: str) -> None:
        """``member`` stopped during the restore: the tasks it reported ready wait for
        their next owner (the group's change its leave brings), not for it."""
        self._ready = {t: r for t, r in self._ready.items() if r[0] != member}

    def held_by(self, member: str) -> list[str]:
        """Tasks ``member`` holds in the current attempt: owned while running, or
        reported ready while restoring (its readiness dies with it)."""
        if self.phase is JobPhase.RUNNING:
            return sorted(self.by_member().get(member, ()))
        if self.phase is JobPhase.RESTORING:
            return sorted(self.ready_by(member))
        return []

    def ready_by(self, member: str) -> frozenset[str]:
        """Tasks ``member`` reported ready for the current restore."""
        return frozenset(t for t, (m, _gen) in self._ready.items() if m == member)
