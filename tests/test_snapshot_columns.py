"""A worker's batch of acknowledgements on the wire: its snapshots in columns (a batch of
``COLUMNS_FROM`` or more), checked as strictly as any field; the object-per-task form of
earlier versions still read and still written for smaller batches (issue 41)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from benchmarks.coordinator_sim import snapshot
from kstream.checkpointstorage.metadata import TaskSnapshot
from kstream.protocol import messages
from kstream.protocol.messages import AcknowledgeCheckpoints, ProtocolError, decode, dump, encode

A = TaskSnapshot("h/a", {"in:0": 5}, 10, 2, 1.5, 2.0, 3.25, 0.0, "w1")
B = TaskSnapshot("h/b", {"up:1": {"stage0-0": 7}}, 20, 0, 0.0, 1.0, 4.0, 0.0, "w1")
MSG = AcknowledgeCheckpoints(4, 2, "w1", {"a": A, "b": B})


@pytest.fixture(autouse=True)
def _columns_from_two(monkeypatch: pytest.MonkeyPatch) -> None:
    """MSG's two snapshots go in columns (a real batch needs COLUMNS_FROM)."""
    monkeypatch.setattr(messages, "COLUMNS_FROM", 2)


def _body(**columns: Any) -> bytes:
    wire = json.loads(encode(MSG))
    wire["columns"] |= columns
    return json.dumps(wire).encode()


def test_a_batch_is_written_in_columns_and_reads_back() -> None:
    wire = json.loads(encode(MSG))
    assert "snapshots" not in wire
    assert wire["columns"] == {
        "task": ["a", "b"],
        "handle": ["h/a", "h/b"],
        "offsets": [{"in:0": 5}, {"up:1": {"stage0-0": 7}}],
        "state_size": [10, 20],
        "uploaded_size": [2, 0],
        "alignment_ms": [1.5, 0.0],
        "sync_ms": [2.0, 1.0],
        "async_ms": [3.25, 4.0],
        "ack_delay_ms": [0.0, 0.0],
        "member": ["w1", "w1"],
    }
    assert decode(encode(MSG)) == MSG
    assert decode(_body(alignment_ms=[1.5, 0])) == MSG  # an int where a float is due


def test_a_batch_of_objects_as_before_columns_still_reads() -> None:
    old = (
        b'{"v":1,"type":"AcknowledgeCheckpoints","checkpoint_id":4,"attempt":2,"member":"w1",'
        b'"snapshots":{"a":{"handle":"h/a","offsets":{"in:0":5},"state_size":10,'
        b'"uploaded_size":2,"alignment_ms":1.5,"sync_ms":2.0,"async_ms":3.25,"member":"w1"},'
        b'"b":{"handle":"h/b","offsets":{"up:1":{"stage0-0":7}},"state_size":20,'
        b'"sync_ms":1,"async_ms":4.0,"member":"w1"}}}'
    )
    assert decode(old) == MSG


def test_columns_are_a_third_smaller_than_an_object_per_task() -> None:
    snaps = {f"stage0-{p}": snapshot(f"stage0-{p}", "worker-host-01:10001", 9) for p in range(100)}
    msg = AcknowledgeCheckpoints(9, 1, "worker-host-01:10001", snaps)
    objects = len(json.dumps({**vars(msg), "snapshots": {t: vars(s) for t, s in snaps.items()}}))
    assert len(dump(msg)) < 0.7 * objects


@pytest.mark.parametrize(
    ("columns", "error"),
    [
        ({"sync_ms": [2.0, "slow"]}, "AcknowledgeCheckpoints.columns.sync_ms: 'slow' is not float"),
        ({"state_size": [10, True]}, "columns.state_size: True is not int"),
        ({"state_size": [10, 2.5]}, "columns.state_size: 2.5 is not int"),
        ({"offsets": [{}, [1]]}, "columns.offsets: [1] is not dict"),
        ({"handle": ["h/a"]}, "columns.handle: not a list of 2 values (one per task)"),
        ({"member": "w1"}, "columns.member: not a list of 2 values"),
        ({"task": ["a", 3]}, "columns.task: 3 is not str"),
        ({"task": "ab"}, "columns.task: 'ab' is not a list of task ids"),
        ({"colour": ["r", "g"]}, "columns ['ack_delay_ms', 'alignment_ms', 'async_ms', 'colour'"),
    ],
)
def test_malformed_columns_raise_protocol_error(columns: dict[str, Any], error: str) -> None:
    with pytest.raises(ProtocolError) as exc:
        decode(_body(**columns))
    assert error in str(exc.value)


def test_columns_with_snapshots_or_not_an_object_are_refused() -> None:
    wire = json.loads(encode(MSG))
    with pytest.raises(ProtocolError, match="both snapshots and columns"):
        decode(json.dumps({**wire, "snapshots": {}}).encode())
    with pytest.raises(ProtocolError, match="columns: 5 is not an object of columns"):
        decode(json.dumps({**wire, "columns": 5}).encode())
    del wire["columns"]["member"]
    with pytest.raises(ProtocolError, match=r"expected .*'member'"):
        decode(json.dumps(wire).encode())


def test_a_batch_smaller_than_columns_from_is_written_as_before_columns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What an older coordinator reads: a job with fewer tasks per worker than
    COLUMNS_FROM can be upgraded by a rolling restart."""
    monkeypatch.setattr(messages, "COLUMNS_FROM", 3)
    wire = json.loads(encode(MSG))
    assert "columns" not in wire and set(wire["snapshots"]) == {"a", "b"}
    assert wire["snapshots"]["a"]["handle"] == "h/a"
    assert decode(encode(MSG)) == MSG
    monkeypatch.setattr(messages, "COLUMNS_FROM", 64)  # the default
    snaps = {f"stage0-{p}": snapshot(f"stage0-{p}", "w1", 9) for p in range(64)}
    assert "columns" in json.loads(dump(AcknowledgeCheckpoints(9, 1, "w1", snaps)))
    del snaps["stage0-0"]
    assert "snapshots" in json.loads(dump(AcknowledgeCheckpoints(9, 1, "w1", snaps)))
