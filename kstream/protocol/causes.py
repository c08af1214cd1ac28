"""Why a failover happened, said from what the coordinator knows: the reason strings
of failovers whose first sign is not their cause.

A worker killed with -9 is first noticed by the others: the group gives its
partitions to a surviving worker, which reports each task it now holds but does not
run (``TaskFailed`` with :data:`~kstream.protocol.messages.REASSIGNED`). The cause is
the owner's fate, not a task failure: :func:`reassignment_reason` names it, so the
restart's cause (:func:`kstream.metrics.labels.restart_cause`) is ``worker_lost``,
``worker_stopped`` or ``rebalance``.
"""

from __future__ import annotations

# Workers heartbeat every second: an owner silent longer than this when the group gives
# its tasks away was lost (killed, hung, cut off), not merely rebalanced.
SILENT_AFTER_S = 3.0


def reassignment_reason(
    task: str,
    member: str,
    owner: str | None,
    owned: list[str],
    *,
    stopped: str | None,
    silent_s: float | None,
) -> str:
    """Why ``member`` was given ``task``, whose owner in the running attempt is ``owner``
    (holding ``owned``): it stopped (``stopped``: its reason), it was lost (silent for
    ``silent_s`` seconds, None: never heard by this coordinator), or the group merely
    rebalanced."""
    if owner is None or owner == member:
        return f"worker {member} was assigned task {task} (the group rebalanced)"
    tasks = ", ".join(owned) or task
    if stopped is not None:
        return f"worker {owner} stopped ({stopped}); the group gave its tasks {tasks} to {member}"
    if silent_s is None or silent_s > SILENT_AFTER_S:
        how = "no heartbeat" if silent_s is None else f"no heartbeat for {silent_s:.1f}s"
        return f"worker {owner} lost: {how}; the group gave its tasks {tasks} to {member}"
    return (
        f"worker {member} was assigned task {task} of {owner}, which still heartbeats "
        "(the group rebalanced)"
    )


def stopped_reason(stopped: dict[str, str]) -> str:
    """Why a job whose owners all stopped gracefully stopped: ``stopped`` maps each owner
    of the running attempt to the reason it gave (``WorkerStopped``)."""
    why = "; ".join(f"{m}: {r}" for m, r in sorted(stopped.items()))
    return f"{'every worker' if len(stopped) > 1 else 'its worker'} stopped ({why})"


def group_change_reason(change: str, silent: dict[str, float], stopped: dict[str, str]) -> str:
    """Why the group's assignment changed while the job ran (``change`` says what was
    seen: a new generation, or a worker whose tasks were revoked), from what is known
    of the other owners of the running attempt: ``silent`` (owner -> seconds since its
    last heartbeat) and ``stopped`` (owner -> why it stopped). An owner silent for
    longer than :data:`SILENT_AFTER_S` was lost — the group noticed first (its session
    timed out); one that stopped left; otherwise workers joined or left (a rebalance:
    ``change`` itself)."""
    lost = sorted(m for m, s in silent.items() if s > SILENT_AFTER_S and m not in stopped)
    if lost:
        m = lost[0]
        return f"worker {m} lost: no heartbeat for {silent[m]:.1f}s ({change})"
    if stopped:
        m = sorted(stopped)[0]
        return f"worker {m} stopped ({stopped[m]}; {change})"
    return change
