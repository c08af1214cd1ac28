"""A worker joining a running job: a hand-over checkpoint before it joins the group
(docs/design.md §6.6).

Its join changes the group, and every change restores the job from a completed
checkpoint. Joining right after a *hold* checkpoint — every task holds after its
snapshot — makes that restore re-process nothing. So before subscribing, the worker
asks for one (``CheckpointRequest`` with reason ``JOINING``, repeated every second) and
reads the control topic until the hold checkpoint it asked for completed.

It joins without one when the coordinator declines (the next trigger does not hold:
an owner did not heartbeat lately — typically this worker's own predecessor, killed)
or does not answer: no message from a coordinator for ``quiet`` seconds (none runs, or
the job is restoring: no triggers come), the job restores or stops meanwhile, the hold
checkpoint is aborted, or nothing completed within the checkpoint timeout and two
intervals. Joining is then what it was before hand-overs: a rollback to the
latest completed checkpoint.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kstream.config import CheckpointingConfig
from kstream.kafka.control import ControlClient
from kstream.protocol.commands import Send
from kstream.protocol.messages import (
    CheckpointAborted,
    CheckpointCompleted,
    JobFailed,
    JobStopped,
    Message,
    Restore,
    Resume,
    TriggerCheckpoint,
    WatermarkBound,
)
from kstream.protocol.worker import REQUEST_EVERY_S, WorkerProtocol

log = logging.getLogger(__name__)

POLL_S = 0.1
COORDINATOR_MESSAGES = (
    TriggerCheckpoint,
    CheckpointCompleted,
    CheckpointAborted,
    WatermarkBound,
    Restore,
    Resume,
)


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
        now = clock()
        if now >= next_request:
            control.post_all([c.message for c in protocol.join_request() if isinstance(c, Send)])
            next_request = now + REQUEST_EVERY_S
        for msg in control.poll(POLL_S):
            read.append(msg)
            if isinstance(msg, COORDINATOR_MESSAGES):
                heard = clock()
            if isinstance(msg, TriggerCheckpoint) and msg.hold:
                holds.add(msg.checkpoint_id)
            elif isinstance(msg, TriggerCheckpoint) and not holds:
                # The answer to the request: declined (an owner is quiet, e.g. the one
                # this worker restarts after a crash, whose tasks cannot hold).
                log.info("checkpoint %d does not hold: joining the group", msg.checkpoint_id)
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
            elif isinstance(msg, Restore | JobStopped | JobFailed):
                log.info("the job %s: joining the group", type(msg).__name__)
                return read
        now = clock()
        if now - heard >= quiet or now >= deadline:
            log.warning(
                "no hand-over checkpoint within %.1f s: joining the group anyway (the job "
                "rolls back to its latest completed checkpoint)",
                now - start,
            )
            return read
