"""A worker joining a running job: a hand-over checkpoint before it joins the group
(docs/design.md §6.6).

Its join changes the group, and every change restores the job from a completed
checkpoint. Joining right after a *hold* checkpoint — every task holds after its
snapshot — makes that restore re-process nothing. So before subscribing, the worker
asks for one (``CheckpointRequest`` with reason ``JOINING``, repeated every second) and
reads the control topic until the hold checkpoint it asked for completed. A job in the
middle of a restore is asked once it resumed (joined during the restore, the change
would come just after the Resume, and the tasks would have run past the checkpoint).

It joins without one when the coordinator declines (``HandoverDeclined``: an owner did
not heartbeat lately — typically this worker's own predecessor, killed) or does not
answer: no message from a coordinator for ``quiet`` seconds (none runs, or a restore
does not end), the job stops or fails meanwhile, the hold checkpoint is aborted, or
nothing completed within the checkpoint timeout and two intervals. Joining is then
what it was before hand-overs: a rollback to the latest completed checkpoint. A
restore meanwhile (another worker's change) is waited out and the request made again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kstream.config import CheckpointingConfig
from kstream.kafka.control import ControlClient
from kstream.protocol.commands import Send
from kstream.protocol.messages import (
    COORDINATOR_MESSAGES,
    CheckpointAborted,
    CheckpointCompleted,
    HandoverDeclined,
    JobFailed,
    JobStopped,
    Message,
    Restore,
    Resume,
    TriggerCheckpoint,
)
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
    answer, see the module); the control messages read meanwhile, in order."""
    start = clock()
    quiet = max(5.0, 2.5 * checkpointing.interval)
    deadline = start + checkpointing.timeout + 2 * checkpointing.interval
    heard = start  # the last message of a coordinator (the history's end counts as one)
    holds: set[int] = set()
    read: list[Message] = []
    next_request = start
    while True:
        if protocol.restoring:
            # Joined now, the change would come after the restore's Resume, however
            # short: the tasks would have run past the checkpoint. Asked once resumed.
            resumed, more = _resumed(control, protocol.attempt, clock, quiet)
            read += more
            protocol.catch_up(more)
            if not resumed:
                return read
            holds, heard, next_request = set(), clock(), clock()
        now = clock()
        if now >= next_request:
            control.post_all([c.message for c in protocol.join_request() if isinstance(c, Send)])
            next_request = now + REQUEST_EVERY_S
        for msg in control.poll(POLL_S):
            read.append(msg)
            protocol.catch_up([msg])
            if isinstance(msg, COORDINATOR_MESSAGES):
                heard = clock()
            if isinstance(msg, TriggerCheckpoint) and msg.hold:
                holds.add(msg.checkpoint_id)
            elif isinstance(msg, HandoverDeclined) and msg.member == protocol.member:
                # An owner is quiet (e.g. the one this worker restarts after a crash,
                # whose tasks cannot hold): the change is a rollback anyway.
                log.info("hand-over declined (%s): joining the group", msg.reason)
                return read
            elif isinstance(msg, CheckpointCompleted) and msg.checkpoint_id in holds:
                if backed(msg):
                    log.info(
                        "hand-over checkpoint %d completed: joining the group (%.1f s)",
                        msg.checkpoint_id,
                        clock() - start,
                    )
                    return read
            elif isinstance(msg, CheckpointAborted) and msg.checkpoint_id in holds:
                log.info("hand-over checkpoint %d aborted: joining the group", msg.checkpoint_id)
                return read
            elif isinstance(msg, JobStopped | JobFailed):
                log.info("the job %s: joining the group", type(msg).__name__)
                return read
            elif isinstance(msg, Restore):  # another change: asked again once it resumed
                holds, next_request = set(), clock()
        now = clock()
        if now - heard >= quiet or now >= deadline:
            log.warning(
                "no hand-over checkpoint within %.1f s: joining the group anyway (the job "
                "rolls back to its latest completed checkpoint)",
                now - start,
            )
            return read


def _resumed(
    control: ControlClient, attempt: int, clock: Callable[[], float], quiet: float
) -> tuple[bool, list[Message]]:
    """Read until the restore of ``attempt`` resumed (True), or the job stopped, failed
    or said nothing for ``quiet`` seconds (False: join now); the messages read."""
    read: list[Message] = []
    heard = clock()
    while clock() - heard < quiet:
        for msg in control.poll(POLL_S):
            read.append(msg)
            if isinstance(msg, Resume) and msg.attempt >= attempt:
                return True, read
            if isinstance(msg, JobStopped | JobFailed):
                return False, read
            if isinstance(msg, COORDINATOR_MESSAGES):
                heard = clock()
    log.info("the job did not resume within %.0f s: joining the group", quiet)
    return False, read
