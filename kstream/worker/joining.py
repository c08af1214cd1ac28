"""A worker joining a running job: a hand-over checkpoint before it joins the group
(docs/design.md §6.6).

Its join changes the group, and every change restores the job from a completed
checkpoint. Joining right after a *hold* checkpoint — every task holds after its
snapshot — makes that restore re-process nothing. So before subscribing, the worker
asks for one (``CheckpointRequest`` with reason ``JOINING``, repeated every second) and
reads the control topic until the hold checkpoint it asked for completed. A job in the
middle of a restore is asked too: nothing runs until its Resume, so when that restore
is another joiner's change (a scale-out), the coordinator answers at once
(``HandoverDeclined`` naming the restore) and waits with the Resume until this worker
is in the group — its change is part of that restore. During any other restore it
answers nothing, and the worker asks again once the job resumed.

It joins without one when no other worker heartbeats (within three heartbeat intervals:
the job's workers all died, this one restarts it), when the coordinator declines (``HandoverDeclined``: an owner did
not heartbeat lately — typically this worker's own predecessor, killed) or does not
answer: no message from a coordinator for ``quiet`` seconds (none runs, or a restore
does not end), the job stops or fails meanwhile, the hold checkpoint is aborted, or
nothing completed within the checkpoint timeout and two intervals, or the coordinator
keeps triggering without a hold (an older version, which knows no hand-overs: a
trigger without one still read HEARD_WITHIN_S and a request period after the first
one since the request — a coordinator elected meanwhile decides within that). Joining is then
what it was before hand-overs: a rollback to the latest completed checkpoint. A
restore meanwhile (another worker's change) is asked at once (see above).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kstream.config import CheckpointingConfig
from kstream.kafka.control import ControlClient
from kstream.protocol.commands import Send
from kstream.protocol.handover import HEARD_WITHIN_S
from kstream.protocol.messages import (
    CheckpointAborted,
    CheckpointCompleted,
    HandoverDeclined,
    Heartbeat,
    JobFailed,
    JobStopped,
    Message,
    TriggerCheckpoint,
)
from kstream.protocol.signing import COORDINATOR_MESSAGES
from kstream.protocol.worker import REQUEST_EVERY_S, WorkerProtocol

log = logging.getLogger(__name__)

POLL_S = 0.1


def wait_for_handover(
    control: ControlClient,
    protocol: WorkerProtocol,
    checkpointing: CheckpointingConfig,
    clock: Callable[[], float],
    backed: Callable[[CheckpointCompleted], bool],
) -> list[Message]:
    """Ask for a hand-over checkpoint and wait until it completed (or the job does not
    answer, see the module); the control messages read meanwhile, in order — every one
    of each batch read, also those after the one that ends the wait."""
    wait = _Wait(protocol, clock, backed, max(5.0, 2.5 * checkpointing.interval))
    deadline = wait.start + checkpointing.timeout + 2 * checkpointing.interval
    read: list[Message] = []
    while wait.outcome is None:
        now = clock()
        if now >= wait.next_request:
            control.post_all([c.message for c in protocol.join_request() if isinstance(c, Send)])
            wait.next_request = now + REQUEST_EVERY_S
        batch = control.poll(POLL_S)
        read += batch
        for msg in batch:
            wait.read(msg)
        wait.timeouts(clock(), deadline)
    log.log(wait.level, "%s: joining the group (%.1f s)", wait.outcome, clock() - wait.start)
    return read


class _Wait:
    """The joiner's wait, fed the control messages one by one (see the module)."""

    def __init__(
        self,
        protocol: WorkerProtocol,
        clock: Callable[[], float],
        backed: Callable[[CheckpointCompleted], bool],
        quiet: float,
    ) -> None:
        self.protocol, self.clock, self.backed, self.quiet = protocol, clock, backed, quiet
        self.start = self.heard = self.next_request = clock()
        self.holds: set[int] = set()  # hold checkpoints triggered since the request
        self.plain_since: float | None = None  # first trigger without a hold read since
        # Live workers heartbeat every interval, from their loops: none within three (and
        # 3 s), nobody is left to hand over from (the job's workers were all killed; this
        # one restarts it). Two were too few: a worker starting its tasks, its loop busy
        # a second at a time, was once taken for gone (integration/test_global_alignment).
        self.alone = max(3.0, 3 * protocol.heartbeat_interval)
        self.beats = 0
        self.outcome: str | None = None  # why the wait ended
        self.level = logging.INFO

    def read(self, msg: Message) -> None:
        restoring = self.protocol.restoring
        self.protocol.catch_up([msg])
        if isinstance(msg, COORDINATOR_MESSAGES):
            self.heard = self.clock()
        self.beats += isinstance(msg, Heartbeat)
        if self.outcome is not None:
            return  # (ended by an earlier message of the batch: the rest is only read)
        if isinstance(msg, JobStopped | JobFailed):
            self.outcome = f"the job: {type(msg).__name__}"
        elif isinstance(msg, HandoverDeclined) and msg.member == self.protocol.client_id:
            # During a joiner's restore: nothing runs until the Resume, which waits
            # for this worker. Otherwise an owner is quiet (e.g. the one this worker restarts
            # after a crash, whose tasks cannot hold): the change is a rollback anyway.
            self.outcome = f"hand-over declined ({msg.reason})"
        elif self.protocol.restoring:
            # A restore began: asked at once; the coordinator lets this worker join
            # now during a joiner's restore (above), otherwise answers nothing, and
            # the request is made again once the job resumed.
            self.holds, self.plain_since = set(), None
            if not restoring:
                self.next_request = self.clock()
        elif restoring:  # it resumed: ask now
            self.next_request = self.clock()
        elif isinstance(msg, TriggerCheckpoint) and msg.hold:
            self.holds.add(msg.checkpoint_id)
        elif isinstance(msg, TriggerCheckpoint):
            self._plain(self.clock())
        elif isinstance(msg, CheckpointCompleted) and msg.checkpoint_id in self.holds:
            if self.backed(msg):
                self.outcome = f"hand-over checkpoint {msg.checkpoint_id} completed"
        elif isinstance(msg, CheckpointAborted) and msg.checkpoint_id in self.holds:
            self.outcome = f"hand-over checkpoint {msg.checkpoint_id} aborted"

    def _plain(self, now: float) -> None:
        """A trigger without a hold, read after this worker asked. A coordinator that
        knows hand-overs holds once it heard its owners (HEARD_WITHIN_S) and read a
        request (one a second), or declines: still none after that, it is an older one."""
        if self.plain_since is None:
            self.plain_since = now
        elif now - self.plain_since >= HEARD_WITHIN_S + REQUEST_EVERY_S:
            self.level = logging.WARNING
            self.outcome = (
                "the coordinator triggers without a hold (a version without hand-overs: "
                "the job rolls back to its latest completed checkpoint)"
            )

    def timeouts(self, now: float, deadline: float) -> None:
        if self.outcome is not None:
            return
        if not self.beats and now - self.start >= self.alone:
            self.outcome = f"no other worker heartbeats (within {self.alone:.1f} s)"
        elif now - self.heard >= self.quiet or now >= deadline:
            self.level = logging.WARNING
            self.outcome = (
                f"no hand-over checkpoint within {now - self.start:.1f} s (the job rolls back "
                "to its latest completed checkpoint)"
            )
