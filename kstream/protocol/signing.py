"""Signed coordinator messages (docs/design.md §5.9). The coordinator signs what it writes with
HMAC-SHA256 under a key only the checkpoint store holds (``<app>/control.key``,
:mod:`kstream.checkpointstorage.controlkey`): ``sign`` appends ``"epoch"`` (the coordinator's
incarnation), ``"seq"`` (the message's number in that epoch) and ``"sig"`` to the
JSON; ``verify`` checks the exact bytes and returns the stamp, by which readers skip
a copy of an earlier message (:mod:`kstream.protocol.replay`). A
coordinator message that does not verify was not written by a coordinator of the
job (any Kafka client can write to the topic): readers that hold the key log,
count and skip it. Workers' messages are reports, not authority, and unsigned.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from kstream.protocol.messages import (
    Adopt,
    CheckpointAborted,
    CheckpointCompleted,
    HandoverDeclined,
    JobFailed,
    JobStopped,
    Restore,
    Resume,
    TriggerCheckpoint,
    WatermarkBound,
)
from kstream.protocol.replay import Stamp

COORDINATOR_MESSAGES: tuple[type[Any], ...] = (
    TriggerCheckpoint,
    CheckpointCompleted,
    CheckpointAborted,
    Restore,
    Resume,
    JobFailed,
    JobStopped,
    WatermarkBound,
    HandoverDeclined,
    Adopt,
)
"""The messages only a coordinator writes (signed)."""

_SIG = b',"sig":"'
_EPOCH = b',"epoch":'
_SEQ = b',"seq":'


def sign(data: bytes, key: bytes, epoch: int, seq: int) -> bytes:
    """``data`` (an ``encode`` result) with the coordinator ``epoch``, the message's
    sequence number ``seq`` in that epoch (:mod:`kstream.protocol.replay`) and the
    HMAC of it all."""
    body = data[:-1] + b"%s%d%s%d" % (_EPOCH, epoch, _SEQ, seq)
    mac = hmac.new(key, body + b"}", hashlib.sha256).hexdigest()
    return body + _SIG + mac.encode() + b'"}'


def verify(data: bytes, key: bytes) -> Stamp | None:
    """The stamp of a message ``sign`` wrote with ``key``; None if it is not one.
    A message signed before sequence numbers (``...,"epoch":E,"sig":...``) has
    ``seq`` None."""
    head, sep, tail = data.rpartition(_SIG)
    if not sep or not tail.endswith(b'"}') or len(tail) != 66:
        return None
    mac = hmac.new(key, head + b"}", hashlib.sha256).hexdigest().encode()
    if not hmac.compare_digest(mac, tail[:-2]):
        return None
    rest, sep, seq = head.rpartition(_SEQ)
    if not (sep and seq.isdigit()):
        rest, seq = head, b""
    _, sep, epoch = rest.rpartition(_EPOCH)
    if not (sep and epoch.isdigit()):
        return None
    return Stamp(int(epoch), int(seq) if seq else None)
