"""Write-ahead buffer of the exactly-once sink: epoch states and the blob format (no broker)."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kstream.config import Guarantee
from kstream.kafka.clients import Producer
from kstream.kafka.commits import CommitMarker, marker_partition
from kstream.kafka.sink import AtLeastOnceSink, ExactlyOnceSink, Sink
from kstream.names import sink_transactional_id
from kstream.sinkbuffer.blob import decode_blob, encode_blob
from kstream.sinkbuffer.buffer import EpochBuffer
from kstream.sinkbuffer.epochs import (
    BlobFormatError,
    ColumnBatch,
    Epoch,
    EpochState,
    OutputRecord,
    SinkError,
    SinkStateError,
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


def _every_field_epochs() -> list[Epoch]:
    """Epochs using every field, None in every nullable field, and an empty epoch."""
    e1 = Epoch()
    e1.append(("a", 3, b"key", b"value", 1_700_000_000_123, [("h1", b"x"), ("h2", None)]))
    e1.append(("b", None, None, None, None, None))
    e1.append(("a", 0, b"", b"", 0, [("empty", b"")]))
    e1.seal(7)
    e2 = Epoch()
    e2.seal(8)
    e3 = Epoch()
    e3.append(("ü-topic", None, b"\x00\xff", b"v" * 3, -5, None))
    e3.seal(9)
    return [e1, e2, e3]


_EVERY_FIELD_RECORDS = [
    (
        7,
        [
            ("a", 3, b"key", b"value", 1_700_000_000_123, [("h1", b"x"), ("h2", None)]),
            ("b", None, None, None, None, None),
            ("a", 0, b"", b"", 0, [("empty", b"")]),
        ],
    ),
    (8, []),
    (9, [("ü-topic", None, b"\x00\xff", b"vvv", -5, None)]),
]

# _every_field_epochs() as written by version 1 (kstream before the columnar format):
# snapshots taken then must still restore.
_V1_BLOB = bytes.fromhex(
    "4b5357420103000100610100620800c3bc2d746f706963030000000700000000000000030000001f0000030000"
    "0003000000050000007b68e5cf8b01000002006b657976616c75650200010000006831780200ffffffff683200"
    "0100000000000000000000000000000000000000000000001f0000000000000000000000000000000000000000"
    "00000100050000000000656d7074790800000000000000000000000900000000000000010000000e0200000000"
    "000200000003000000fbffffffffffffff000000ff767676fa5fac2d"
)

# The same epochs in version 2: pins the format (a change here breaks old snapshots).
_V2_BLOB = bytes.fromhex(
    "4b5357420203000100610100620800c3bc2d746f7069630300000007000000000000000300000002000001000000"
    "0303000000000000000000000001000000010000000303000000000000000000000001000000010000000300000000"
    "0000006b6579030500000000000000000000000100000001000000050000000000000076616c7565037b68e5cf8b01"
    "0000000000000000000000000000000000000100000001000000020000000000000002000200010000006831780200"
    "ffffffff6832020000000100050000000000656d707479080000000000000000000000020202000000000000000002"
    "00000000000000000200000000090000000000000001000000010200000102000000020000000000000000ff010300"
    "0000030000000000000076767601fbffffffffffffff00000000fe4bea57"
)


def _contents(epochs: list[Epoch]) -> list[tuple[int | None, list[OutputRecord]]]:
    assert all(e.state is EpochState.SEALED for e in epochs)
    return [(e.checkpoint_id, list(e.records)) for e in epochs]


def test_blob_round_trips_every_field_and_none_in_each() -> None:
    blob = encode_blob(_every_field_epochs())
    assert blob == _V2_BLOB
    assert _contents(decode_blob(blob)) == _EVERY_FIELD_RECORDS


def test_version_1_blobs_still_decode() -> None:
    assert _contents(decode_blob(_V1_BLOB)) == _EVERY_FIELD_RECORDS
    body = _V1_BLOB[:-4] + b"\x00"
    with pytest.raises(BlobFormatError, match="trailing bytes"):
        decode_blob(body + struct.pack("<I", zlib.crc32(body)))


def test_empty_blob_round_trips() -> None:
    assert decode_blob(encode_blob([])) == []
    assert EpochBuffer.from_blob(None).sealed == []


def test_whole_columns_of_none_and_mixed_columns_round_trip() -> None:
    all_none: list[OutputRecord] = [("t", None, None, None, None, None)] * 5
    mixed: list[OutputRecord] = [
        ("t", None, b"k", None, 1, None),
        ("u", 2, None, b"v", None, [("h", None)]),
        ("t", None, b"kk", b"", 3, []),  # an empty header list is stored as None
        ("v", 2, b"k", b"vvv", None, None),
    ]
    epochs = []
    for cp, records in ((1, all_none), (2, mixed)):
        e = Epoch(records=list(records))
        e.seal(cp)
        epochs.append(e)
    mixed[2] = ("t", None, b"kk", b"", 3, None)
    assert _contents(decode_blob(encode_blob(epochs))) == [(1, all_none), (2, mixed)]


def test_blob_is_compact() -> None:
    e = Epoch()
    for i in range(100):
        e.append(("orders.out", None, b"k" * 8, b"v" * 32, 1_700_000_000_000 + i, None))
    e.seal(1)
    blob = encode_blob([e])
    # topic, partition and the equal key/value lengths are stored once; per record
    # only the 40 payload bytes and the 8-byte timestamp
    header = 4 + 1 + 2 + (2 + 10) + 4
    columns = (1 + 2) + 1 + (1 + 4 + 8) + (1 + 4 + 8) + (1 + 100 * 8) + 4
    assert len(blob) == header + 12 + columns + 100 * 40 + 4


def test_topic_indexes_are_16_bit() -> None:
    e = Epoch(records=[(f"t{i}", None, None, None, None, None) for i in range(65_536)])
    e.seal(1)
    with pytest.raises(SinkError, match="at most 65535 topics, got 65536"):
        encode_blob([e])


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
    with pytest.raises(BlobFormatError, match="version 4 is not supported"):
        decode_blob(blob[:4] + b"\x04" + blob[5:])
    with pytest.raises(BlobFormatError, match="version 0 is not supported"):
        decode_blob(blob[:4] + b"\x00" + blob[5:])
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


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_any_flipped_byte_or_truncation_is_refused(data: st.DataObject) -> None:
    blob = encode_blob(_every_field_epochs())
    i = data.draw(st.integers(0, len(blob) - 1))
    flipped = bytearray(blob)
    flipped[i] ^= data.draw(st.integers(1, 255))
    with pytest.raises(BlobFormatError):
        decode_blob(bytes(flipped))
    with pytest.raises(BlobFormatError):
        decode_blob(blob[:i])


def test_blob_rejects_non_increasing_epochs() -> None:
    a, b = Epoch(), Epoch()
    a.seal(5)
    b.seal(5)
    with pytest.raises(BlobFormatError, match="not strictly increasing"):
        decode_blob(encode_blob([a, b]))


# Hand-built version-2 epochs with valid checksums: the structure itself is checked.


def _v2(*epochs: bytes, topics: tuple[str, ...] = ("t",), nepochs: int | None = None) -> bytes:
    body = b"KSWB\x02" + struct.pack("<H", len(topics))
    for t in topics:
        body += struct.pack("<H", len(t.encode())) + t.encode()
    body += struct.pack("<I", len(epochs) if nepochs is None else nepochs) + b"".join(epochs)
    return body + struct.pack("<I", zlib.crc32(body))


_NONE_COL = b"\x00"
_NO_BYTES = b"\x00" + struct.pack("<Q", 0)  # all null, 0 bytes


def _col(mode: int, fmt: str, *values: int, nulls: tuple[int, ...] = ()) -> bytes:
    out = bytes([mode]) + struct.pack(f"<{len(values)}{fmt}", *values)
    if mode == 3:
        out += struct.pack(f"<I{len(nulls)}I", len(nulls), *nulls)
    return out


def _epoch(
    n: int,
    *,
    topics: bytes = b"\x01\x00\x00",  # CONST topic 0
    partitions: bytes = _NONE_COL,
    keys: bytes = _NO_BYTES,
    values: bytes = _NO_BYTES,
    timestamps: bytes = _NONE_COL,
    headers: bytes = b"\x00\x00\x00\x00",
    cp: int = 1,
) -> bytes:
    return struct.pack("<qI", cp, n) + topics + partitions + keys + values + timestamps + headers


def _bytes_col(lengths: bytes, data: bytes) -> bytes:
    return lengths + struct.pack("<Q", len(data)) + data


def test_hand_built_version_2_epoch_decodes() -> None:
    blob = _v2(
        _epoch(
            2,
            partitions=_col(3, "i", 4, 0, nulls=(1,)),
            keys=_bytes_col(_col(2, "i", 1, 2), b"abc"),
            values=_bytes_col(_col(1, "i", 2), b"xxyy"),
            timestamps=_col(2, "q", -(2**63), 2**63 - 1),
            headers=struct.pack("<IIHHi", 1, 1, 1, 1, -1) + b"h",
        ),
        topics=("t", "u"),
    )
    assert _contents(decode_blob(blob)) == [
        (
            1,
            [
                ("t", 4, b"a", b"xx", -(2**63), None),
                ("t", None, b"bc", b"yy", 2**63 - 1, [("h", None)]),
            ],
        )
    ]


@pytest.mark.parametrize(
    ("epoch", "reason"),
    [
        (_epoch(2, keys=_bytes_col(_col(2, "i", 1, 2), b"abcd")), "lengths add up to 3, 4 bytes"),
        (_epoch(2, keys=_bytes_col(_col(2, "i", -1, 4), b"abc")), "negative length -1"),
        (_epoch(2, keys=_bytes_col(_col(1, "i", 2), b"abc")), "2 x 2 bytes do not make the 3"),
        (_epoch(1, keys=_bytes_col(_col(1, "i", -3), b"")), "1 x -3 bytes"),
        (_epoch(1, keys=_bytes_col(_NONE_COL, b"x")), "all null but 1 bytes present"),
        (_epoch(1, values=_col(7, "i")), "values lengths: unknown column mode 7"),
        (_epoch(2, partitions=_col(3, "i", 0, 0, nulls=(2,))), "null indexes are not increasing"),
        (_epoch(3, partitions=_col(3, "i", 0, 0, 0, nulls=(1, 1))), "null indexes"),
        (_epoch(1, topics=_col(1, "H", 1)), "topic index beyond 1 topics"),
        (_epoch(2, topics=_col(2, "H", 0, 5)), "topic index beyond 1 topics"),
        (_epoch(1, topics=_NONE_COL), "topic index column has mode 0"),
        (_epoch(1, topics=_col(3, "H", 0, nulls=(0,))), "topic index column has mode 3"),
        (_epoch(1, headers=struct.pack("<IIH", 1, 1, 0)), "record 1 with 0 headers"),
        (_epoch(2, headers=struct.pack("<IIH", 1, 2, 1)), "record 2 with 1 headers"),
        (
            _epoch(2, headers=struct.pack("<I", 2) + struct.pack("<IHHi", 1, 1, 0, 0) * 2),
            "record 1 with 1 headers \\(after record 1",
        ),
        (_epoch(1, headers=struct.pack("<IIHHi", 1, 0, 1, 0, -2)), "header value length -2"),
        (_epoch(1, headers=struct.pack("<IIHHi", 1, 0, 1, 0, 5)), "truncated: epoch 1 headers"),
        (_epoch(1, timestamps=b"\x02\x00"), "truncated: epoch 1 timestamps needs 8 bytes"),
        (_epoch(1)[:-1], "truncated"),
        (_epoch(1) + b"\x00", "1 trailing bytes"),
    ],
)
def test_malformed_version_2_bodies_are_refused(epoch: bytes, reason: str) -> None:
    with pytest.raises(BlobFormatError, match=reason):
        decode_blob(_v2(epoch))


def test_epoch_count_must_match_the_epochs_present() -> None:
    assert _contents(decode_blob(_v2(_epoch(0)))) == [(1, [])]
    with pytest.raises(BlobFormatError, match="truncated: epoch header"):
        decode_blob(_v2(_epoch(0), nepochs=2))
    with pytest.raises(BlobFormatError, match="trailing bytes"):
        decode_blob(_v2(_epoch(0), nepochs=0))


_headers = st.none() | st.lists(
    st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=8)), min_size=1, max_size=3
)
_record = st.tuples(
    st.text(min_size=1, max_size=12),
    st.none() | st.integers(-(2**31), 2**31 - 1),
    st.none() | st.binary(max_size=16),
    st.none() | st.binary(max_size=32),
    st.none() | st.integers(-(2**63), 2**63 - 1),
    _headers,
)
# few distinct values, so that whole columns come out constant, all null or mixed
_alike_record = st.tuples(
    st.sampled_from(["a", "b"]),
    st.sampled_from([None, 0, 1]),
    st.sampled_from([None, b"", b"k", b"kk"]),
    st.sampled_from([None, b"", b"v"]),
    st.sampled_from([None, 0, 1]),
    st.sampled_from([None, [("h", None)]]),
)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.lists(_record, max_size=5) | st.lists(_alike_record, max_size=8), max_size=4),
    st.lists(st.integers(1, 3), min_size=4, max_size=4),
)
def test_blob_round_trip_property(
    epochs_records: list[list[OutputRecord]], gaps: list[int]
) -> None:
    epochs = []
    cp = -1
    for records, gap in zip(epochs_records, gaps, strict=False):
        cp += gap
        e = Epoch(records=list(records))
        e.seal(cp)
        epochs.append(e)
    assert _contents(decode_blob(encode_blob(epochs))) == [
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


# ---- column batches: chunks of an epoch


def batch(topic: str, *ids: int) -> ColumnBatch:
    """The records ``rec(i, topic)`` for ``ids`` as a column batch."""
    return ColumnBatch(
        topic,
        [f"k{i}".encode() for i in ids],
        [f"v{i}".encode() for i in ids],
        [1000 + i for i in ids],
    )


def _mixed_buffer() -> EpochBuffer:
    """Epoch 1: records, batches, records, a batch of another topic; epoch 2: batch, record."""
    buf = EpochBuffer()
    buf.append(rec(1))
    buf.append_columns(batch("out", 2, 3))
    buf.append_columns(batch("out", 4))
    buf.extend([rec(5), ("x", 2, None, b"v", None, [("h", b"1")])])
    buf.append_columns(batch("other", 6, 7))
    buf.seal(1)
    buf.append_columns(batch("out", 8))
    buf.append(rec(9))
    buf.seal(2)
    return buf


_MIXED: list[tuple[int, list[OutputRecord]]] = [
    (
        1,
        [
            rec(1),
            rec(2),
            rec(3),
            rec(4),
            rec(5),
            ("x", 2, None, b"v", None, [("h", b"1")]),
            rec(6, "other"),
            rec(7, "other"),
        ],
    ),
    (2, [rec(8), rec(9)]),
]


def test_column_batches_and_records_mix_in_write_order() -> None:
    buf = _mixed_buffer()
    assert _contents(buf.sealed) == _MIXED
    assert [e.size for e in buf.sealed] == [8, 2] == [len(e.records) for e in buf.sealed]
    # a record after records joins their chunk; a batch is a chunk of its own
    assert [type(c).__name__ for c in buf.sealed[0].chunks] == [
        "list",
        "ColumnBatch",
        "ColumnBatch",
        "list",
        "ColumnBatch",
    ]
    records = buf.sealed[0].records
    assert records[1] == rec(2) and records[-1] == rec(7, "other") and records[5][0] == "x"
    assert records[2:4] == [rec(3), rec(4)]
    with pytest.raises(IndexError):
        records[8]


def test_a_column_batch_is_kept_by_reference_and_empty_ones_are_dropped() -> None:
    e = Epoch()
    b = batch("out", 1, 2)
    e.append_columns(b)
    e.append_columns(ColumnBatch("out", [], [], []))
    assert e.chunks == [b] and isinstance(e.chunks[0], ColumnBatch)
    assert e.chunks[0].keys is b.keys and e.size == 2
    with pytest.raises(ValueError, match="2 keys, 1 values and 2 timestamps"):
        ColumnBatch("out", [b"a", b"b"], [b"v"], [1, 2])
    e.seal(1)
    with pytest.raises(SinkStateError, match="cannot add"):
        e.append_columns(batch("out", 3))


def test_mixed_chunks_round_trip_through_the_blob_unchanged() -> None:
    buf = _mixed_buffer()
    blob = buf.blob()
    assert _contents(decode_blob(blob)) == _MIXED
    # the format is that of the same records written one by one
    same = []
    for cp, records in _MIXED:
        e = Epoch(records=records)
        e.seal(cp)
        same.append(e)
    assert blob == encode_blob(same)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.lists(
            st.tuples(
                st.sampled_from(["a", "b"]),
                st.lists(
                    st.tuples(
                        st.sampled_from([None, b"", b"k"]),
                        st.sampled_from([None, b"v", b"vv"]),
                        st.sampled_from([0, 1, -(2**63)]),
                    ),
                    max_size=4,
                ),
            )
            | st.lists(_alike_record, min_size=1, max_size=3),
            max_size=4,
        ),
        max_size=3,
    )
)
def test_chunked_epochs_encode_like_their_records(epochs_chunks: list[list[Any]]) -> None:
    chunked, flat = [], []
    for cp, chunks in enumerate(epochs_chunks, 1):
        e = Epoch()
        for c in chunks:
            if isinstance(c, tuple):
                topic, rows = c
                e.append_columns(
                    ColumnBatch(
                        topic, [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]
                    )
                )
            else:
                e.extend(c)
        e.seal(cp)
        chunked.append(e)
        f = Epoch(records=list(e.records))
        f.seal(cp)
        flat.append(f)
    blob = encode_blob(chunked)
    assert blob == encode_blob(flat)
    assert _contents(decode_blob(blob)) == [(e.checkpoint_id, list(e.records)) for e in flat]


def test_a_blob_of_column_batches_decodes_to_a_column_batch() -> None:
    e = Epoch()
    e.append_columns(batch("out", 1, 2))
    e.append_columns(ColumnBatch("out", [None, b"k"], [b"v", None], [5, 5]))
    e.seal(3)
    (back,) = decode_blob(encode_blob([e]))
    assert [type(c) for c in back.chunks] == [ColumnBatch]
    assert back.records == list(e.records)
    # anything else a batch cannot hold decodes to records
    r = Epoch(records=[rec(1), ("out", 0, b"k", b"v", 1, None)])
    r.seal(4)
    (back,) = decode_blob(encode_blob([r]))
    assert [type(c) for c in back.chunks] == [list]


def test_counts_due_committed_and_drop_through_with_column_batches() -> None:
    buf = EpochBuffer()
    for cp in (3, 4, 6):
        buf.append_columns(batch("out", cp, cp + 100))
        buf.append(rec(cp + 200))
        buf.seal(cp)
    buf.seal(7)  # empty
    assert [e.size for e in buf.due(6)] == [3, 3, 3]
    assert not buf.sealed[-1].records and buf.sealed[0].records
    assert buf.drop_through(4) == 6
    assert [e.checkpoint_id for e in buf.sealed] == [6, 7]
    due = buf.due(7)
    buf.committed(due, 7)
    assert buf.sealed == [] and [e.state for e in due] == [EpochState.COMMITTED] * 2
    assert buf.last_committed == 7


# ---- publishing (a fake producer: no broker)


class FakeProducer:
    """Records what is produced; ``full`` makes that many produce calls raise BufferError."""

    def __init__(self, full: int = 0) -> None:
        self.sent: list[tuple[Any, ...]] = []
        self.polls: list[float] = []
        self.full = full
        self.transactions: list[str] = []

    def produce(self, topic: str, value: Any = None, key: Any = None, **kw: Any) -> None:
        if self.full:
            self.full -= 1
            raise BufferError("queue full")
        self.sent.append(
            (topic, kw.get("partition", -1), key, value, kw.get("timestamp", 0), kw.get("headers"))
        )

    def poll(self, timeout: float = 0) -> int:
        self.polls.append(timeout)
        return 0

    def list_topics(self, topic: str, timeout: float) -> Any:
        return SimpleNamespace(topics={topic: SimpleNamespace(error=None, partitions={0: None})})

    def begin_transaction(self) -> None:
        self.transactions.append("begin")

    def commit_transaction(self, timeout: float) -> None:
        self.transactions.append("commit")

    def flush(self, timeout: float = 0) -> int:
        return 0


def _as_produced(r: OutputRecord) -> tuple[Any, ...]:
    topic, partition, key, value, ts, headers = r
    return (topic, -1 if partition is None else partition, key, value, ts or 0, headers)


def _eos_sink(producer: FakeProducer) -> ExactlyOnceSink:
    sink = ExactlyOnceSink("shop", "sink-0", "127.0.0.1:1")  # no connection is made
    sink._producer, sink.attempt = producer, 1
    return sink


def test_exactly_once_publishes_chunks_in_epoch_and_write_order() -> None:
    p = FakeProducer(full=2)
    sink = _eos_sink(p)
    sink.write(rec(1))
    sink.write_columns("out", [b"k2", b"k3"], [b"v2", b"v3"], [1002, 1003])
    sink.write_batch([rec(5), ("x", 2, None, b"v", None, [("h", b"1")])])
    sink.on_barrier(1)
    sink.write_columns("out", [b"k8"], [b"v8"], [1008])
    sink.on_barrier(2)
    sink.write_columns("out", [b"k9"], [b"v9"], [1009])  # open epoch: stays
    assert sink.on_checkpoint_completed(2) == 6
    expected: list[OutputRecord] = [
        rec(1),
        rec(2),
        rec(3),
        rec(5),
        ("x", 2, None, b"v", None, [("h", b"1")]),
        rec(8),
    ]
    assert p.sent[:-1] == [_as_produced(r) for r in expected]
    assert p.sent[-1][0] == "shop.commits"  # the marker last, in the same transaction
    assert p.transactions == ["begin", "commit"]
    assert p.polls == [0.05, 0.05]  # a full queue is served and the record retried
    assert sink.buffer.sealed == [] and sink.buffer.open.size == 1
    assert sink.on_checkpoint_completed(2) == 0


def test_exactly_once_publishes_a_decoded_blob_like_the_buffer() -> None:
    first, again = FakeProducer(), FakeProducer()
    sink = _eos_sink(first)
    sink.buffer = _mixed_buffer()
    blob = sink.buffer_blob()
    assert sink.on_checkpoint_completed(2) == 10
    restored = _eos_sink(again)
    restored.buffer = EpochBuffer.from_blob(blob)
    assert restored.on_checkpoint_completed(2) == 10
    assert again.sent == first.sent
    assert first.sent[:-1] == [_as_produced(r) for _, rs in _MIXED for r in rs]


def test_publishing_serves_the_producer_every_1000_records_across_chunks() -> None:
    p = FakeProducer()
    sink = _eos_sink(p)
    for i in range(5):  # 5 batches of 500: polls after records 1000 and 2000
        ids = range(i * 500, (i + 1) * 500)
        sink.write_columns("out", [b"k"] * 500, [b"v"] * 500, list(ids))
    sink.on_barrier(1)
    assert sink.on_checkpoint_completed(1) == 2500
    assert p.polls == [0, 0]
    assert [s[4] for s in p.sent[:-1]] == list(range(2500))


def test_at_least_once_write_columns_produces_at_once() -> None:
    p = FakeProducer(full=1)
    sink = AtLeastOnceSink.__new__(AtLeastOnceSink)  # a fake producer instead of a client
    sink.task, sink.timeout, sink._producer = "sink-0", 1.0, cast(Producer, p)
    sink.failed, sink.first_error, sink.produced = 0, None, 0
    sink.write_columns("out", [b"k1", None], [b"v1", b"v2"], [1001, 7])
    sink.write(rec(3))
    assert p.sent == [
        ("out", -1, b"k1", b"v1", 1001, None),
        ("out", -1, None, b"v2", 7, None),
        _as_produced(rec(3)),
    ]
    assert sink.produced == 3
    assert p.polls == [0.05, 0]  # the retry after BufferError, then the batch's poll
    with pytest.raises(ValueError, match="1 keys, 2 values"):
        sink.write_columns("out", [b"k"], [b"v", b"w"], [1, 2])


def test_a_sink_without_write_columns_gets_records() -> None:
    class ListSink(Sink):
        guarantee = Guarantee.AT_LEAST_ONCE

        def __init__(self) -> None:
            self.got: list[OutputRecord] = []

        def write(self, record: OutputRecord) -> None:
            self.got.append(record)

        def write_batch(self, records: Iterable[OutputRecord]) -> None:
            self.got.extend(records)

        def on_barrier(self, checkpoint_id: int) -> None: ...

        def buffer_blob(self) -> None: ...

        def on_checkpoint_completed(self, checkpoint_id: int) -> int:
            return 0

        def recover(self, blob: bytes | None, attempt: int) -> int:
            return 0

        def close(self) -> None: ...

    s = ListSink()
    s.write_columns("out", [b"k1", b"k2"], [b"v1", b"v2"], [1001, 1002])
    assert s.got == [rec(1), rec(2)]
