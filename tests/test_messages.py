"""Control protocol: round trips and rejection of malformed, unknown and oversized records."""

from __future__ import annotations

import json

import pytest

from kstream.checkpointstorage.metadata import TaskSnapshot
from kstream.protocol.messages import (
    MAX_MESSAGE_BYTES,
    AcknowledgeCheckpoint,
    CheckpointAborted,
    CheckpointCompleted,
    CheckpointRequest,
    DeclineCheckpoint,
    Heartbeat,
    JobFailed,
    Message,
    ProtocolError,
    Restore,
    Resume,
    TaskFailed,
    TaskReady,
    TriggerCheckpoint,
    decode,
    encode,
)

ALL: list[Message] = [
    TriggerCheckpoint(7, 2, 1_700_000_000_123),
    AcknowledgeCheckpoint(
        7,
        "s1-0",
        2,
        TaskSnapshot(
            "app/tasks/s1-0/m-7.json",
            {"in:0": 42, "in:1": 17},
            state_size=1000,
            uploaded_size=200,
            alignment_ms=1.5,
            sync_ms=2.0,
            async_ms=30.0,
            member="w1",
        ),
    ),
    DeclineCheckpoint(7, "s1-0", 2, "disk full"),
    CheckpointCompleted(7, 2),
    CheckpointAborted(7, "timed out"),
    Restore(3, 7),
    Restore(1, None),
    TaskReady(3, "s1-0", "w1", 12),
    Resume(3, {"s1-0": "w1", "s1-1": "w2"}),
    JobFailed("too many failures"),
    Heartbeat("w1", ("s1-0", "s1-1"), 12),
    Heartbeat("w1", ("s1-0",), 12, restored=7),
    TaskFailed("s1-0", "w1", 3, "ZeroDivisionError in map"),
    CheckpointRequest("w1", 3, "graceful stop"),
]


@pytest.mark.parametrize("msg", ALL, ids=lambda m: type(m).__name__)
def test_round_trip(msg: Message) -> None:
    assert decode(encode(msg)) == msg


def test_wire_form_has_type_and_version() -> None:
    assert json.loads(encode(CheckpointCompleted(5, 1))) == {
        "v": 1,
        "type": "CheckpointCompleted",
        "checkpoint_id": 5,
        "attempt": 1,
    }


def test_a_heartbeat_without_restore_progress_is_written_as_before_it() -> None:
    """Readers of an older version refuse a field they do not know: a heartbeat says how
    many tasks its worker restored only while it restores."""
    assert "restored" not in json.loads(encode(Heartbeat("w1", (), 1)))
    assert json.loads(encode(Heartbeat("w1", (), 1, restored=2)))["restored"] == 2


def test_optional_ack_fields_default() -> None:
    raw = {"v": 1, "type": "AcknowledgeCheckpoint", "checkpoint_id": 1, "task_id": "t"}
    raw |= {"attempt": 0, "snapshot": {"handle": "h"}}
    assert decode(json.dumps(raw).encode()) == AcknowledgeCheckpoint(1, "t", 0, TaskSnapshot("h"))


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (None, "empty record"),
        (b"\xff\xfe", "not JSON"),
        (b"{not json", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"type": "JobFailed", "reason": "x"}', "unsupported schema version None"),
        (b'{"v": 2, "type": "JobFailed", "reason": "x"}', "unsupported schema version 2"),
        (b'{"v": 1, "type": "RunShell", "cmd": "rm -rf /"}', "unknown message type 'RunShell'"),
        (b'{"v": 1, "type": "__init__"}', "unknown message type '__init__'"),
        (b'{"v": 1, "type": "CheckpointCompleted", "checkpoint_id": 1}', "missing field 'attempt'"),
        (
            b'{"v": 1, "type": "CheckpointCompleted", "checkpoint_id": "1", "attempt": 0}',
            "CheckpointCompleted.checkpoint_id: '1' is not int",
        ),
        (
            b'{"v": 1, "type": "CheckpointCompleted", "checkpoint_id": true, "attempt": 0}',
            "CheckpointCompleted.checkpoint_id: True is not int",
        ),
        (
            b'{"v": 1, "type": "CheckpointCompleted", "checkpoint_id": 1, "attempt": 0, "x": 1}',
            "unexpected fields ['x']",
        ),
        (
            b'{"v": 1, "type": "Resume", "attempt": 1, "owners": {"t": 5}}',
            "Resume.owners['t']: 5 is not str",
        ),
        (
            b'{"v": 1, "type": "Heartbeat", "member": "m", "tasks": "t", "generation": 1}',
            "Heartbeat.tasks: 't' is not",
        ),
        (
            b'{"v": 1, "type": "Restore", "attempt": 1, "checkpoint_id": 1.5}',
            "Restore.checkpoint_id: 1.5 is not",
        ),
    ],
)
def test_malformed_records_raise_protocol_error(data: bytes | None, error: str) -> None:
    with pytest.raises(ProtocolError) as exc:
        decode(data)
    assert error in str(exc.value)


def test_oversized_record_is_rejected_before_parsing() -> None:
    reason = "x" * MAX_MESSAGE_BYTES
    data = b'{"v": 1, "type": "JobFailed", "reason": "' + reason.encode() + b'"}'
    with pytest.raises(ProtocolError, match="exceeds"):
        decode(data)
    with pytest.raises(ProtocolError, match="over the"):
        encode(JobFailed(reason))
