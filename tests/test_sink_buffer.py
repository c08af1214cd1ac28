"""Write-ahead buffer of the exactly-once sink: epoch states and the blob format (no broker)."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kstream.kafka.sink import (
    BlobFormatError,
    CommitMarker,
    Epoch,
    EpochBuffer,
    EpochState,
    OutputRecord,
    SinkError,
    SinkStateError,
    decode_blob,
    encode_blob,
    marker_partition,
    sink_transactional_id,
)


def rec(i: int, topic: str = "out") -> OutputRecord:
    return (topic, None, f"k{i}".encode(), f"v{i}".encode(), 1000 + i, None)


# ---- epoch state machine


def test_epoch_moves_open_sealed_committed() -> None:
    e = Epoch()
    e.append(rec(1))
    e.seal(4)
    assert (e.state, e.checkpoint_id) == (EpochState.SEALED, 4)
    e.mark_committed()
    assert e.state is EpochState.COMMITTED


def test_epoch_refuses_illegal_transitions() -> None:
    e = Epoch()
    with pytest.raises(SinkStateError, match="open -> committed"):
        e.mark_committed()
    e.seal(1)
    with pytest.raises(SinkStateError, match="sealed -> sealed"):
        e.seal(2)
    with pytest.raises(SinkStateError, match="cannot add"):
        e.append(rec(1))
    e.mark_committed()
    with pytest.raises(SinkStateError, match="committed -> committed"):
        e.mark_committed()


def test_records_between_barriers_form_the_epoch() -> None:
    buf = EpochBuffer()
    buf.append(rec(1))
    buf.extend([rec(2), rec(3)])
    buf.seal(1)
    buf.append(rec(4))
    buf.seal(2)
    buf.append(rec(5))  # open epoch: not in any snapshot yet
    assert [(e.checkpoint_id, [r[2] for r in e.records]) for e in buf.sealed] == [
        (1, [b"k1", b"k2", b"k3"]),
        (2, [b"k4"]),
    ]
    assert [r[2] for r in buf.open.records] == [b"k5"]
    # the blob holds the sealed epochs only
    assert [(e.checkpoint_id, len(e.records)) for e in decode_blob(buf.blob())] == [(1, 3), (2, 1)]


def test_barrier_ids_must_increase() -> None:
    buf = EpochBuffer()
    buf.seal(5)
    with pytest.raises(SinkStateError, match="barrier 5 is not above"):
        buf.seal(5)
    with pytest.raises(SinkStateError, match="barrier 3 is not above"):
        buf.seal(3)


def test_completion_commits_epochs_at_or_below_and_subsumes_aborted_ones() -> None:
    buf = EpochBuffer()
    for cp in (1, 2, 3):
        buf.append(rec(cp))
        buf.seal(cp)
    due = buf.due(2)  # checkpoint 1 was aborted; completion of 2 subsumes it
    assert [e.checkpoint_id for e in due] == [1, 2]
    buf.committed(due, 2)
    assert [e.state for e in due] == [EpochState.COMMITTED, EpochState.COMMITTED]
    assert [e.checkpoint_id for e in buf.sealed] == [3]
    assert buf.last_committed == 2
    with pytest.raises(SinkStateError, match="barrier 2 is not above"):
        buf.seal(2)


def test_drop_through_marker() -> None:
    buf = EpochBuffer()
    for cp in (3, 4, 6):
        buf.extend([rec(cp), rec(cp + 100)])
        buf.seal(cp)
    assert buf.drop_through(4) == 4
    assert [e.checkpoint_id for e in buf.sealed] == [6]
    assert buf.last_committed == 4


# ---- blob format


def test_blob_round_trips_every_field() -> None:
    e1 = Epoch()
    e1.append(("a", 3, b"key", b"value", 1_700_000_000_123, [("h1", b"x"), ("h2", None)]))
    e1.append(("b", None, None, None, None, None))
    e1.append(("a", 0, b"", b"", 0, [("empty", b"")]))
    e1.seal(7)
    e2 = Epoch()
    e2.append(("ü-topic", None, b"\x00\xff", b"v" * 1000, -5, None))
    e2.seal(9)
    out = decode_blob(encode_blob([e1, e2]))
    assert [(e.checkpoint_id, e.state, e.records) for e in out] == [
        (
            7,
            EpochState.SEALED,
            [
                ("a", 3, b"key", b"value", 1_700_000_000_123, [("h1", b"x"), ("h2", None)]),
                ("b", None, None, None, None, None),
                ("a", 0, b"", b"", 0, [("empty", b"")]),
            ],
        ),
        (9, EpochState.SEALED, [("ü-topic", None, b"\x00\xff", b"v" * 1000, -5, None)]),
    ]


def test_empty_blob_round_trips() -> None:
    assert decode_blob(encode_blob([])) == []
    assert EpochBuffer.from_blob(None).sealed == []


def test_blob_is_compact() -> None:
    e = Epoch()
    for i in range(100):
        e.append(("orders.out", None, b"k" * 8, b"v" * 32, 1_700_000_000_000 + i, None))
    e.seal(1)
    blob = encode_blob([e])
    # 25 bytes framing + 40 payload per record; topic name stored once
    assert len(blob) == 4 + 1 + 2 + (2 + 10) + 4 + 12 + 100 * (25 + 40) + 4


def test_only_sealed_epochs_go_into_a_blob() -> None:
    with pytest.raises(SinkStateError, match="only sealed epochs"):
        encode_blob([Epoch()])


def test_blob_rejects_corruption_truncation_and_unknown_versions() -> None:
    e = Epoch()
    e.append(rec(1))
    e.seal(1)
    blob = encode_blob([e])
    with pytest.raises(BlobFormatError, match="bad magic"):
        decode_blob(b"XXXX" + blob[4:])
    with pytest.raises(BlobFormatError, match="version 2 is not supported"):
        decode_blob(blob[:4] + b"\x02" + blob[5:])
    flipped = bytearray(blob)
    flipped[20] ^= 0x01
    with pytest.raises(BlobFormatError, match="checksum mismatch"):
        decode_blob(bytes(flipped))
    with pytest.raises(BlobFormatError, match="checksum mismatch"):
        decode_blob(blob[:-5] + blob[-4:])
    # a structurally wrong body with a valid checksum is still refused
    body = blob[:-4] + b"\x00"
    with pytest.raises(BlobFormatError, match="trailing bytes"):
        decode_blob(body + struct.pack("<I", zlib.crc32(body)))


def test_blob_rejects_non_increasing_epochs() -> None:
    a, b = Epoch(), Epoch()
    a.seal(5)
    b.seal(5)
    with pytest.raises(BlobFormatError, match="not strictly increasing"):
        decode_blob(encode_blob([a, b]))


_headers = st.none() | st.lists(
    st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=8)), min_size=1, max_size=3
)
_record = st.tuples(
    st.text(min_size=1, max_size=12),
    st.none() | st.integers(0, 2**31 - 1),
    st.none() | st.binary(max_size=16),
    st.none() | st.binary(max_size=32),
    st.none() | st.integers(-(2**63), 2**63 - 1),
    _headers,
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(_record, max_size=5), max_size=4))
def test_blob_round_trip_property(epochs_records: list[list[OutputRecord]]) -> None:
    epochs = []
    for i, records in enumerate(epochs_records):
        e = Epoch(records=list(records))
        e.seal(i * 2 + 1)
        epochs.append(e)
    out = decode_blob(encode_blob(epochs))
    assert [(e.checkpoint_id, e.records) for e in out] == [
        (e.checkpoint_id, e.records) for e in epochs
    ]


# ---- names and markers


def test_transactional_id_and_marker_codec() -> None:
    assert sink_transactional_id("shop", "sink-3") == "shop.sink.sink-3"
    m = CommitMarker("sink-3", 12, 2)
    assert m.encode() == b'{"task":"sink-3","checkpoint":12,"attempt":2}'
    assert CommitMarker.decode(m.encode()) == m
    with pytest.raises(SinkError, match="malformed commit marker"):
        CommitMarker.decode(b'{"task":"x","checkpoint":"12","attempt":1}')
    with pytest.raises(SinkError, match="malformed commit marker"):
        CommitMarker.decode(b"not json")
    assert marker_partition("sink-3", 1) == 0
    assert marker_partition("sink-3", 8) == zlib.crc32(b"sink-3") % 8


def test_exactly_once_sink_refuses_to_commit_before_recover() -> None:
    from kstream.kafka.sink import ExactlyOnceSink

    sink = ExactlyOnceSink("shop", "sink-0", "127.0.0.1:1")  # no connection is made
    sink.write(rec(1))
    sink.on_barrier(1)
    with pytest.raises(SinkStateError, match="recover\\(\\) must run before committing"):
        sink.on_checkpoint_completed(1)
    assert sink.transactional_id == "shop.sink.sink-0"
    assert [e.checkpoint_id for e in decode_blob(sink.buffer_blob())] == [1]
