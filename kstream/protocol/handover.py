"""Hand-over checkpoints: a change of the group at a point where nothing was processed
past the restored checkpoint (docs/design.md §6.6). Pure, fed messages and a clock.

A worker about to leave (SIGTERM) or to join a running job asks for a checkpoint with
reason :data:`LEAVING` or :data:`JOINING`. The coordinator's next trigger is then a
*hold* checkpoint: every task holds after its snapshot — reads, processes and emits
nothing more — and nothing is triggered after it. The leaver exits once it completed,
the joiner joins the group once it completed; the group's change that follows is
restored from that checkpoint at once (not a failure: no restart delay), and the
rollback re-processes nothing: no task went past it.

Holding is only a pause: a task that stops holding without a restore (the hold
checkpoint was aborted, the coordinator triggers again, the change never came) goes on
from where it held, which is consistent with every other task.
"""

from __future__ import annotations

LEAVING = "graceful stop: leaving the group"
JOINING = "joining the group"
HANDOVER_REASONS = frozenset({LEAVING, JOINING})

HEARD_WITHIN_S = 3.0
"""A hand-over is declined while an owner did not heartbeat for this long (lost, or
restarting: its tasks could not hold; the checkpoint that follows is a normal one)."""

HOLD_TIMEOUT_S = 20.0
"""How long after a hold checkpoint completed the coordinator waits for the group's
change before it triggers again (the tasks then go on from where they held)."""


class Handover:
    """The coordinator's side: asked for, triggered, completed (holding), or none."""

    def __init__(self, timeout: float = HOLD_TIMEOUT_S) -> None:
        self.timeout = timeout
        self.wanted_by: str | None = None  # the member that asked, until its trigger
        self.checkpoint_id: int | None = None  # the hold checkpoint, triggered
        self.completed_at: float | None = None  # when it completed: holding since
        self.reason: str | None = None  # why the hold was asked for (LEAVING, JOINING)
        # The restore in progress is the change a joiner's hold prepared: another worker
        # starting now may join during it (a scale-out of several workers at once).
        self.joins_welcome = False

    def request(
        self, member: str, why: str, quiet: list[str], running_for: float
    ) -> tuple[bool, str | None]:
        """``member`` asked for a hand-over (``why``: LEAVING or JOINING), owners
        ``quiet``, the coordinator up for ``running_for`` s: whether to trigger a
        checkpoint now, and the reason it is declined (None: not declined). A hold
        checkpoint unless one is in flight or holding already (it serves this request
        too), or an owner is quiet (its tasks cannot hold: declined, a leaver's final
        checkpoint all the same). A coordinator up for less than HEARD_WITHIN_S has
        heard nobody yet: it decides at a later request (they repeat every second)."""
        if quiet and running_for < HEARD_WITHIN_S:
            return False, None
        if quiet:
            return why == LEAVING, f"no heartbeat from {', '.join(quiet)}"
        wanted = self.want(member)
        if wanted:
            self.reason = why
        return wanted, None

    def want(self, member: str) -> bool:
        """``member`` asked for a hand-over; whether a new hold checkpoint is wanted (not
        when one is already in flight or holding)."""
        if self.checkpoint_id is not None:
            return False
        self.wanted_by = member
        return True

    def take(self, checkpoint_id: int) -> bool:
        """Checkpoint ``checkpoint_id`` is triggered now: whether it holds."""
        if self.wanted_by is None:
            return False
        self.wanted_by, self.checkpoint_id = None, checkpoint_id
        return True

    @property
    def blocks_triggers(self) -> bool:
        """A hold checkpoint is in flight or holding: its tasks would skip another."""
        return self.checkpoint_id is not None

    @property
    def holding(self) -> bool:
        """The hold checkpoint completed: the job waits for the group's change."""
        return self.completed_at is not None

    def completed(self, checkpoint_id: int, now: float) -> None:
        if checkpoint_id == self.checkpoint_id:
            self.completed_at = now

    def aborted(self, checkpoint_id: int) -> None:
        """The hold checkpoint failed: the tasks release (the asking worker asks again)."""
        if checkpoint_id == self.checkpoint_id and self.completed_at is None:
            self.checkpoint_id = None

    def expired(self, now: float) -> bool:
        """Holding for longer than ``timeout`` with no change of the group: triggering
        resumes (ended here, once)."""
        if self.completed_at is None or now - self.completed_at < self.timeout:
            return False
        self.clear()
        return True

    def changed(self) -> bool:
        """The group changed: whether a hold prepared it (restored at once, not counted
        as a restart). No hold any more; joins are welcome during the restore when a
        joiner asked for that hold. Joining during a restore another change began (a
        leave, in a rolling restart) would make the Resume wait for the new process:
        one longer pause of every task instead of two short ones."""
        holding, joining = self.holding, self.reason == JOINING
        self.clear()
        self.joins_welcome = holding and joining
        return holding

    def clear(self) -> None:
        """The job resumed or stopped: no hold any more."""
        self.wanted_by = self.checkpoint_id = self.completed_at = self.reason = None
        self.joins_welcome = False
