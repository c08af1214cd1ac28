"""The exactly-once sink buffer's blob format: round trips, versions, corruption (no broker)."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kstream.sinkbuffer.blob import encode_blob
from kstream.sinkbuffer.blobdecode import decode_blob
from kstream.sinkbuffer.buffer import EpochBuffer
from kstream.sinkbuffer.epochs import (
    BlobFormatError,
    Epoch,
    EpochState,
    OutputRecord,
    SinkError,
    SinkStateError,
)


def rec(i: int, topic: str = "out") -> OutputRecord:
    return (topic, None, f"k{i}".encode(), f"v{i}".encode(), 1000 + i, None)


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
