"""What the coordinator knows of the workers: when each was last heard from, which tasks it
runs, and which stopped gracefully (and why). Pure; the coordinator asks it who is lost,
who runs a task, and why tasks moved (:mod:`kstream.protocol.causes`)."""

from __future__ import annotations

from collections.abc import Mapping

from kstream.protocol.causes import group_change_reason, reassignment_reason
from kstream.protocol.messages import Heartbeat


class Membership:
    """Members heard from (member -> (last seen, tasks it runs)) and members stopped."""

    def __init__(self) -> None:
        self.seen: dict[str, tuple[float, tuple[str, ...]]] = {}
        self.stopped: dict[str, str] = {}  # members that stopped gracefully -> why
        self.beat: dict[str, float] = {}  # members heard by this coordinator -> when
        self.producers: dict[str, str] = {}  # member -> its sinks' transactional id
        self.pulses: dict[str, float] = {}  # member -> its last Pulse (cooperative, §6.8)

    def heard(self, member: str, tasks: tuple[str, ...], now: float, producer: str = "") -> None:
        """A heartbeat: ``member`` runs ``tasks`` at ``now`` (its sinks' ``producer``)."""
        self.seen[member] = (now, tasks)
        self.beat[member] = now
        if producer:
            self.producers[member] = producer

    def pulse(self, member: str, now: float) -> None:
        """``member``'s process lives at ``now`` (its pulse thread, not its loop)."""
        self.pulses[member] = now

    def quiet(self, members: set[str], within: float, now: float) -> list[str]:
        """Those of ``members`` that did not heartbeat to this coordinator within
        ``within`` seconds (a hand-over waits for none of them: kstream.protocol.handover)."""
        return sorted(m for m in members if now - self.beat.get(m, float("-inf")) > within)

    def expect(self, owners: Mapping[str, str], now: float) -> None:
        """Owners named by the recovered attempt: lost after the timeout unless they
        heartbeat to this coordinator."""
        by_member: dict[str, list[str]] = {}
        for task, member in owners.items():  # (one pass: not one per member)
            by_member.setdefault(member, []).append(task)
        for member, tasks in by_member.items():
            self.seen.setdefault(member, (now, tuple(sorted(tasks))))

    def expect_pulses(
        self, members: set[str], now: float, silent: Mapping[str, float] | None = None
    ) -> None:
        """``members`` pulse (cooperative assignment: every worker does): each counts as
        having pulsed at ``now``, so one that never pulses to this coordinator is judged
        silent like any other — the worker that hosted its predecessor, killed with it;
        one ``silent`` names (seconds: what a candidate taking over saw) as last heard —
        pulse and heartbeat — at ``now`` less that."""
        silent = silent or {}
        for member in members:
            self.pulses.setdefault(member, now - silent.get(member, 0.0))
            seen = self.seen.get(member)
            if member in silent and seen is not None:
                self.seen[member] = (min(seen[0], now - silent[member]), seen[1])

    def silent(
        self, timeout: float, now: float, grace: Mapping[str, float] | None = None
    ) -> list[tuple[str, float]]:
        """Members not heard from for over ``timeout`` s (and their ``grace``), forgotten
        here, with their silence."""
        extra = grace or {}
        gone = [
            (m, now - seen)
            for m, (seen, _t) in self.seen.items()
            if now - seen > timeout + extra.get(m, 0.0)
        ]
        for member, _s in gone:
            del self.seen[member]
        return gone

    def cut_off(self, now: float) -> None:
        """The coordinator could not hear anyone until ``now``: silence so far counts for nothing."""
        for member, (seen, tasks) in self.seen.items():
            self.seen[member] = (max(seen, now), tasks)
        for member, pulsed in self.pulses.items():
            self.pulses[member] = max(pulsed, now)

    def stop(self, member: str, reason: str) -> None:
        """``member`` exited gracefully: not lost, stopped."""
        self.seen.pop(member, None)
        self.stopped[member] = reason

    def live(self) -> set[str]:
        """Members heard from (or expected) that did not stop (a stopped one's late
        heartbeat makes it heard again, not live)."""
        return self.seen.keys() - self.stopped.keys()

    def all_stopped(self, members: set[str]) -> bool:
        return members <= self.stopped.keys()

    def joined(self, member: str, tasks: tuple[str, ...], now: float) -> bool:
        """A heartbeat while the job is stopped: True (and the stops forgotten) when it
        comes from a worker that did not stop, i.e. one that joined."""
        if member in self.stopped:
            return False  # a heartbeat it sent before it stopped
        self.seen[member] = (now, tasks)
        self.stopped.clear()
        return True

    def last_runners(self, tasks: list[str], now: float) -> list[str]:
        """``task last seen Ns ago on worker M`` for each of ``tasks`` some member ran,
        naming the member that ran it most recently (one pass over what members run)."""
        wanted = set(tasks)
        last: dict[str, tuple[float, str]] = {}
        for m, (s, running) in self.seen.items():
            for task in wanted.intersection(running):
                last[task] = max(last.get(task, (s, m)), (s, m))
        return [
            f"{task} last seen {now - last[task][0]:.1f}s ago on worker {last[task][1]}"
            for task in tasks
            if task in last
        ]

    def reassigned(
        self, task: str, reporter: str, owner: str | None, owned: list[str], now: float
    ) -> str:
        """Why ``reporter`` found ``task`` (owned by ``owner``) reassigned."""
        seen = self.seen.get(owner) if owner else None
        return reassignment_reason(
            task,
            reporter,
            owner,
            owned,
            stopped=self.stopped.get(owner) if owner else None,
            silent_s=None if seen is None else now - seen[0],
        )

    def group_change(self, member: str, change: str, owners: set[str], now: float) -> str:
        """The reason of a group change ``member`` reported: a lost or stopped owner other
        than ``member`` if there is one."""
        others = owners - {member}
        silent = {m: now - self.seen[m][0] for m in others if m in self.seen}
        stopped = {m: self.stopped[m] for m in others if m in self.stopped}
        return group_change_reason(change, silent, stopped)

    def moved(
        self,
        hb: Heartbeat,
        previous: int,
        owners: Mapping[str, frozenset[str]],
        attempt: int,
        now: float,
    ) -> tuple[str, bool] | None:
        """Whether a running job's tasks moved, from ``hb`` (the group's generation was
        ``previous`` before it; ``owners``: member -> the tasks it owns): the reason to restore them and whether that is normal
        operation (a worker joined, left or restarted) rather than a fault; None if not."""
        if previous >= 0 and hb.generation > previous:
            # A worker joined or left the group (scaling, a restart): normal operation,
            # unless an owner fell silent (killed: the group noticed first) or stopped.
            change = f"consumer group generation changed {previous} -> {hb.generation}"
            reason = self.group_change(
                hb.member, f"{change} (partitions were reassigned)", set(owners), now
            )
            return reason, reason.startswith(change)
        if not owners:
            return None
        # A worker runs exactly the tasks it owns; anything else means it lost them (a
        # rebalance, a restart) and the job must be restored.
        owned = owners.get(hb.member, frozenset())
        if not hb.tasks and owned:
            # A worker that restarted (or rejoined after a rebalance) runs nothing until
            # the next restore names it an owner again: the normal way back in.
            revoked = (
                f"worker {hb.member} no longer runs its tasks {', '.join(sorted(owned))} "
                f"of attempt {attempt} (the group rebalanced or the worker restarted): "
                "restoring them"
            )
            reason = self.group_change(hb.member, revoked, set(owners), now)
            return reason, reason == revoked
        if set(hb.tasks) != owned:
            return (
                f"worker {hb.member} runs tasks {sorted(hb.tasks)} but owns {sorted(owned)} "
                f"in attempt {attempt}",
                False,
            )
        return None
