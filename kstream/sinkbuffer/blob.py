"""The versioned blob format of sealed sink epochs in a task's snapshot (pure: no I/O)."""

from __future__ import annotations

import io
import struct
import sys
import zlib
from array import array
from collections.abc import Iterable, Sequence
from itertools import repeat
from operator import itemgetter
from typing import Any, BinaryIO, cast

from kstream.sinkbuffer.epochs import (
    BlobFormatError,
    Chunk,
    ColumnBatch,
    Epoch,
    EpochState,
    Header,
    OutputRecord,
    Segment,
    SinkError,
    SinkStateError,
)

# --------------------------------------------------------------------------- blob format
#
# Little-endian, CRC-protected. Every version shares the frame
#
#   magic b"KSWB" | version u8 | ntopics u16 | (len u16, utf-8)*ntopics |
#   nepochs u32 | nepochs epochs | crc32 u32 of everything before it
#
# and epochs must have strictly increasing checkpoint ids. Encoding writes
# version 2; decoding reads versions 1 and 2 (snapshots taken before 2).
#
# Version 2: columnar, so encoding and decoding are a few C-level operations per
# column, not Python work per record. Per epoch:
#
#   checkpoint_id i64 | nrecords u32 |
#   topic index column (u16) | partition column (i32) |
#   key length column (i32) | key_bytes u64 | keys, concatenated |
#   value length column (i32) | value_bytes u64 | values, concatenated |
#   timestamp column (i64) |
#   nheadered u32 | per record with headers, by increasing record index:
#     record_index u32, nheaders u16 (>= 1),
#     per header: name_len u16, value_len i32 (-1: null), name, value
#
# An integer column of the epoch's n records is a mode byte and a payload:
#
#   0 NONE   every value is None               no payload
#   1 CONST  all n equal, none is None         the value
#   2 FULL   none is None                      n values
#   3 NULLS  some are None                     n values (0 where None), nnull u32,
#                                              nnull u32 record indexes, increasing
#
# None is recorded by position, never by a sentinel value: every i64 is a valid
# timestamp and every i32 a valid partition. A null key or value has a null
# length and no bytes; the lengths add up exactly to key_bytes / value_bytes.
# Topics are never null (mode CONST or FULL). Empty header lists are stored as
# None, as in version 1.
#
# Version 3: segmented, for a buffer that spilled to disk
# (:mod:`kstream.sinkbuffer.spill`): written as a stream from the spill files, never
# decoded as a whole. Per epoch:
#
#   checkpoint_id i64 | nsegments u32 |
#   per segment: nrecords u32 | length u64 | a version-2 blob of one epoch (id 0)
#
# Each segment carries its own CRC besides the frame's; it is decoded when it is
# published, one at a time.
#
# Version 1: row-wise. Per epoch: checkpoint_id i64, nrecords u32,
#   per record: flags u8, topic_index u16, partition i32, key_len u32,
#               value_len u32, timestamp i64, nheaders u16, key, value,
#               per header: name_len u16, value_len i32 (-1: null), name, value
#   flags: 1 partition set, 2 key set, 4 value set, 8 timestamp set, 16 headers set.

_MAGIC = b"KSWB"
_VERSION = 2
_REC = struct.Struct("<BHiIIqH")
_HDR = struct.Struct("<Hi")
_HEADERED = struct.Struct("<IH")
_EPOCH = struct.Struct("<qI")
_SEGMENT = struct.Struct("<IQ")
_U8 = struct.Struct("<B")
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_F_PART, _F_KEY, _F_VALUE, _F_TS, _F_HEADERS = 1, 2, 4, 8, 16
_NONE, _CONST, _FULL, _NULLS = 0, 1, 2, 3
_MODE = [bytes([m]) for m in range(4)]
_FIELDS = [itemgetter(i) for i in range(6)]  # topic, partition, key, value, ts, headers
_SWAP = sys.byteorder != "little"  # array items are native order; the blob's are little


def _typecode(candidates: str, size: int) -> str:
    """The ``array`` typecode among ``candidates`` whose items have ``size`` bytes."""
    for code in candidates:
        if array(code).itemsize == size:
            return code
    raise ImportError(f"no {size}-byte array typecode among {candidates!r} on this platform")


_A_U16 = _typecode("H", 2)
_A_U32 = _typecode("IL", 4)
_A_I32 = _typecode("il", 4)
_A_I64 = _typecode("ql", 8)


def encode_blob(epochs: Iterable[Epoch]) -> bytes:
    """Encode sealed epochs (checkpoint id + records) in blob format version 2."""
    epochs = list(epochs)
    topics: dict[str, int] = {}
    out: list[bytes] = []
    for e in epochs:
        if e.state is not EpochState.SEALED or e.checkpoint_id is None:
            raise SinkStateError(f"only sealed epochs go into a blob, got {e.state}")
        out.append(_EPOCH.pack(e.checkpoint_id, e.size))
        _epoch_columns(e.chunks, e.size, topics, out)
    head = [_MAGIC, bytes([_VERSION]), _U16.pack(len(topics))]
    for name in topics:
        nb = name.encode()
        head.append(_U16.pack(len(nb)))
        head.append(nb)
    head.append(_U32.pack(len(epochs)))
    body = b"".join(head + out)
    return body + _U32.pack(zlib.crc32(body))


def encode_segment(chunks: list[Chunk]) -> bytes:
    """Chunks of one epoch as a segment: a version-2 blob of one epoch with id 0."""
    return encode_blob([Epoch(0, EpochState.SEALED, chunks=chunks)])


def decode_segment(data: bytes, records: int) -> Chunk:
    """The chunk a segment of ``records`` records holds; BlobFormatError if it does not."""
    epochs = decode_blob(data)
    if len(epochs) != 1 or epochs[0].checkpoint_id != 0 or epochs[0].size != records:
        raise BlobFormatError(
            f"sink buffer segment is not one epoch of {records} records: {epochs!r}"
        )
    return epochs[0].chunks[0] if epochs[0].chunks else []


class MemorySegment(Segment):
    """An encoded segment held in memory (a version-3 blob's, read back on restore)."""

    __slots__ = ("data",)

    def __init__(self, records: int, data: bytes | memoryview) -> None:
        super().__init__(records)
        self.data = data

    def load(self) -> Chunk:
        return decode_segment(bytes(self.data), self.records)

    def encoded(self) -> bytes:
        return bytes(self.data)

    def pin(self) -> MemorySegment:
        return MemorySegment(self.records, self.data)

    def release(self) -> None:
        self.data = b""


def write_segmented_blob(out: BinaryIO, epochs: Sequence[tuple[int, Sequence[Segment]]]) -> int:
    """Write sealed epochs, each as (checkpoint id, segments), to ``out`` in blob format
    version 3, one segment in memory at a time; returns the bytes written."""
    crc, size = 0, 0

    def put(data: bytes) -> None:
        nonlocal crc, size
        out.write(data)
        crc = zlib.crc32(data, crc)
        size += len(data)

    put(_MAGIC + bytes([3]) + _U32.pack(len(epochs)))
    for checkpoint_id, segments in epochs:
        put(_EPOCH.pack(checkpoint_id, len(segments)))
        for seg in segments:
            data = seg.encoded()
            put(_SEGMENT.pack(seg.records, len(data)))
            put(data)
    out.write(_U32.pack(crc))
    return size + 4


def _epoch_columns(chunks: list[Chunk], n: int, topics: dict[str, int], out: list[bytes]) -> None:
    """Append the version-2 columns of an epoch's ``n`` records in ``chunks`` to ``out``,
    numbering new topics in ``topics`` as first seen.

    Column batches are never taken apart record by record: their lists are
    concatenated, and their partitions and headers (all ``None``) are not looked at.
    """
    topic_of = _FIELDS[0]
    per_chunk: list[str | list[str]] = []  # a chunk's one topic, or its records' topics
    for c in chunks:
        if isinstance(c, ColumnBatch):
            per_chunk.append(c.topic)
        else:
            names = list(map(topic_of, c))
            one = names and names.count(names[0]) == len(names)
            per_chunk.append(names[0] if one else names)
    for t in per_chunk:  # first seen, first numbered
        for name in (t,) if isinstance(t, str) else dict.fromkeys(t):
            topics.setdefault(name, len(topics))
    if len(topics) > 0xFFFF:
        raise SinkError(f"a sink buffer blob holds at most 65535 topics, got {len(topics)}")
    if n and all(isinstance(t, str) for t in per_chunk) and len(set(per_chunk)) == 1:
        out += (_MODE[_CONST], _U16.pack(topics[cast(str, per_chunk[0])]))  # the usual case
    else:
        indexes: list[int] = []
        for c, t in zip(chunks, per_chunk, strict=True):
            if isinstance(t, str):
                indexes += [topics[t]] * len(c)
            else:
                indexes += map(topics.__getitem__, t)
        _int_column(indexes, _A_U16, out)
    batches = n > 0 and all(isinstance(c, ColumnBatch) for c in chunks)
    if batches:
        out.append(_MODE[_NONE])  # partitions
    else:
        _int_column(_gather(chunks, 1), _A_I32, out)
    _bytes_column(_gather(chunks, 2), out)
    _bytes_column(_gather(chunks, 3), out)
    _int_column(_gather(chunks, 4), _A_I64, out)
    if batches:
        out.append(_U32.pack(0))  # no record has headers
    else:
        _headers_section(_gather(chunks, 5), out)


def _gather(chunks: list[Chunk], field: int) -> list[Any]:
    """Field ``field`` (an ``OutputRecord`` index) of every record in ``chunks``, in order.

    A single column batch's own list is returned as it is (callers only read it).
    """
    if len(chunks) == 1 and isinstance(chunks[0], ColumnBatch) and 2 <= field <= 4:
        return _batch_column(chunks[0], field)
    values: list[Any] = []
    get = _FIELDS[field]
    for c in chunks:
        if isinstance(c, ColumnBatch):
            values += _batch_column(c, field)
        else:
            values += map(get, c)
    return values


def _batch_column(c: ColumnBatch, field: int) -> list[Any]:
    """Field ``field`` (an ``OutputRecord`` index) of every record of ``c``."""
    if field == 2:
        return c.keys
    if field == 3:
        return c.values
    if field == 4:
        return c.timestamps
    return [c.topic if field == 0 else None] * len(c)


def _le(a: array[int]) -> bytes:
    """The items of ``a`` as little-endian bytes (swaps ``a`` in place on big-endian hosts)."""
    if _SWAP:
        a.byteswap()
    return a.tobytes()


def _int_column(values: list[Any], code: str, out: list[bytes]) -> None:
    """Append ``values`` (ints or None) to ``out`` as an integer column of ``array`` type ``code``."""
    n = len(values)
    try:
        col = array(code, values)
    except TypeError:  # a None among them (anything else fails again below)
        if values.count(None) == n:
            out.append(_MODE[_NONE])
            return
        nulls = [i for i, v in enumerate(values) if v is None]
        col = array(code, [0 if v is None else v for v in values])
        out += (_MODE[_NULLS], _le(col), _U32.pack(len(nulls)), _le(array(_A_U32, nulls)))
        return
    if n and col.tobytes() == col[:1].tobytes() * n:
        out += (_MODE[_CONST], _le(col[:1]))
    else:
        out += (_MODE[_FULL], _le(col))


def _bytes_column(values: list[Any], out: list[bytes]) -> None:
    """Append ``values`` (bytes or None) to ``out``: their lengths, total size, concatenation."""
    try:
        data = b"".join(values)
        lengths: list[int | None] = list(map(len, values))
    except TypeError:  # a None among them (anything else fails again below)
        data = b"".join([v for v in values if v is not None])
        lengths = [None if v is None else len(v) for v in values]
    _int_column(lengths, _A_I32, out)
    out += (_U64.pack(len(data)), data)


def _headers_section(headers: list[list[Header] | None], out: list[bytes]) -> None:
    """Append the records that have headers (rare) to ``out``: count, then index and headers."""
    if headers.count(None) == len(headers):
        out.append(_U32.pack(0))
        return
    rows = [(i, h) for i, h in enumerate(headers) if h]
    out.append(_U32.pack(len(rows)))
    for i, h in rows:
        out.append(_HEADERED.pack(i, len(h)))
        for name, value in h:
            nb = name.encode()
            out += (_HDR.pack(len(nb), -1 if value is None else len(value)), nb)
            if value:
                out.append(value)


def decode_blob(blob: bytes) -> list[Epoch]:
    """The sealed epochs encoded in ``blob`` (version 1 or 2); BlobFormatError if it is not valid."""
    if len(blob) < len(_MAGIC) + 1 + 2 + 4 + 4 or blob[:4] != _MAGIC:
        raise BlobFormatError("not a kstream sink buffer blob (bad magic or too short)")
    decode_body = _DECODERS.get(blob[4])
    if decode_body is None:
        raise BlobFormatError(
            f"sink buffer blob version {blob[4]} is not supported (this kstream reads "
            f"versions {', '.join(map(str, _DECODERS))}); was it written by a newer kstream?"
        )
    body = memoryview(blob)[:-4]
    (crc,) = _U32.unpack_from(blob, len(blob) - 4)
    if zlib.crc32(body) != crc:
        raise BlobFormatError("sink buffer blob checksum mismatch (corrupt or truncated)")
    try:
        epochs = decode_body(body)
    except (struct.error, UnicodeDecodeError, IndexError) as e:
        raise BlobFormatError(f"sink buffer blob is malformed: {e}") from e
    ids = [e.checkpoint_id for e in epochs]
    if ids != sorted(set(i for i in ids if i is not None)):
        raise BlobFormatError(f"sink buffer blob epochs are not strictly increasing: {ids}")
    return epochs


class _Reader:
    """A bounds-checked cursor over a blob body; running past the end is a BlobFormatError."""

    __slots__ = ("end", "mv", "pos")

    def __init__(self, mv: memoryview, pos: int) -> None:
        self.mv, self.pos, self.end = mv, pos, len(mv)

    def take(self, size: int, what: str) -> memoryview:
        start = self.pos
        if size > self.end - start:
            raise BlobFormatError(
                f"sink buffer blob is truncated: {what} needs {size} bytes at offset {start}, "
                f"{self.end - start} left"
            )
        self.pos = start + size
        return self.mv[start : self.pos]

    def unpack(self, fmt: struct.Struct, what: str) -> tuple[Any, ...]:
        return fmt.unpack(self.take(fmt.size, what))

    def ints(self, code: str, count: int, what: str) -> list[int]:
        a = array(code)
        a.frombytes(self.take(count * a.itemsize, what))
        if _SWAP:
            a.byteswap()
        return a.tolist()


def _decode_body_v2(mv: memoryview) -> list[Epoch]:
    r = _Reader(mv, 5)
    (ntopics,) = r.unpack(_U16, "topic count")
    names = [
        bytes(r.take(r.unpack(_U16, "topic")[0], "topic name")).decode() for _ in range(ntopics)
    ]
    (nepochs,) = r.unpack(_U32, "epoch count")
    epochs: list[Epoch] = []
    for _ in range(nepochs):
        cp, n = r.unpack(_EPOCH, "epoch header")
        where = f"epoch {cp}"
        topic_mode, column = _read_int_column(r, _A_U16, n, f"{where} topic indexes")
        if topic_mode not in (_CONST, _FULL):
            raise BlobFormatError(
                f"sink buffer blob {where}: topic index column has mode {topic_mode}"
            )
        indexes = cast("list[int]", column)  # CONST and FULL hold no None
        if n and max(indexes[:1] if topic_mode == _CONST else indexes) >= ntopics:
            raise BlobFormatError(f"sink buffer blob {where}: topic index beyond {ntopics} topics")
        if topic_mode == _FULL:
            topics = list(map(names.__getitem__, indexes))
        else:
            topics = [names[indexes[0]]] * n if n else []
        part_mode, partitions = _read_int_column(r, _A_I32, n, f"{where} partitions")
        keys = _read_bytes_column(r, n, f"{where} keys")
        values = _read_bytes_column(r, n, f"{where} values")
        ts_mode, timestamps = _read_int_column(r, _A_I64, n, f"{where} timestamps")
        headers = _read_headers(r, n, f"{where} headers")
        chunk: Chunk
        batch = topic_mode == _CONST and part_mode == _NONE and ts_mode in (_CONST, _FULL)
        if n and batch and headers is None:
            # a column batch's shape: read back as one, without building records
            chunk = ColumnBatch(topics[0], keys, values, cast("list[int]", timestamps))
        else:
            chunk = list(
                zip(
                    topics,
                    partitions,
                    keys,
                    values,
                    timestamps,
                    headers or repeat(None, n),
                    strict=True,
                )
            )
        epochs.append(Epoch(cp, EpochState.SEALED, chunks=[chunk]))
    if r.pos != r.end:
        raise BlobFormatError(f"sink buffer blob has {r.end - r.pos} trailing bytes")
    return epochs


def _read_int_column(r: _Reader, code: str, n: int, what: str) -> tuple[int, list[int | None]]:
    """The mode and the ``n`` values (None where null) of an integer column."""
    (mode,) = r.unpack(_U8, what)
    if mode == _NONE:
        return mode, [None] * n
    if mode == _CONST:
        return mode, cast("list[int | None]", r.ints(code, 1, what) * n)
    if mode not in (_FULL, _NULLS):
        raise BlobFormatError(f"sink buffer blob {what}: unknown column mode {mode}")
    values = cast("list[int | None]", r.ints(code, n, what))
    if mode == _NULLS:
        (nnull,) = r.unpack(_U32, f"{what} null count")
        nulls = r.ints(_A_U32, nnull, f"{what} null indexes")
        if nulls != sorted(set(nulls)) or (nulls and nulls[-1] >= n):
            raise BlobFormatError(
                f"sink buffer blob {what}: null indexes are not increasing record indexes < {n}"
            )
        for i in nulls:
            values[i] = None
    return mode, values


def _read_bytes_column(r: _Reader, n: int, what: str) -> list[bytes | None]:
    """The ``n`` values (None where null) of a bytes column; lengths must add up exactly."""
    mode, lengths = _read_int_column(r, _A_I32, n, f"{what} lengths")
    (size,) = r.unpack(_U64, f"{what} size")
    read = io.BytesIO(r.take(size, what)).read  # read(length) of each value, in order
    if mode == _NONE:
        if size:
            raise BlobFormatError(f"sink buffer blob {what}: all null but {size} bytes present")
        return [None] * n
    if mode == _CONST:
        step = cast(int, lengths[0]) if n else 0
        if step < 0 or step * n != size:
            raise BlobFormatError(
                f"sink buffer blob {what}: {n} x {step} bytes do not make the {size} bytes present"
            )
        return list(map(read, repeat(step, n)))
    if mode == _NULLS:
        sizes = [0 if x is None else x for x in lengths]
    else:
        sizes = cast("list[int]", lengths)  # FULL holds no None
    if n and min(sizes) < 0:
        raise BlobFormatError(f"sink buffer blob {what}: negative length {min(sizes)}")
    if sum(sizes) != size:
        raise BlobFormatError(
            f"sink buffer blob {what}: lengths add up to {sum(sizes)}, {size} bytes present"
        )
    out: list[bytes | None] = list(map(read, sizes))  # lengths checked: reads exactly size
    if mode == _NULLS:
        out = [None if x is None else v for x, v in zip(lengths, out, strict=True)]
    return out


def _read_headers(r: _Reader, n: int, what: str) -> list[list[Header] | None] | None:
    """The ``n`` records' headers (None for most) from the headers section; ``None`` if
    no record has headers."""
    (count,) = r.unpack(_U32, f"{what} count")
    if not count:
        return None
    headers: list[list[Header] | None] = [None] * n
    last = -1
    for _ in range(count):
        i, nh = r.unpack(_HEADERED, what)
        if not last < i < n or nh == 0:
            raise BlobFormatError(
                f"sink buffer blob {what}: record {i} with {nh} headers (after record {last}, "
                f"{n} records)"
            )
        h: list[Header] = []
        for _ in range(nh):
            nlen, vlen = r.unpack(_HDR, what)
            name = bytes(r.take(nlen, f"{what} name")).decode()
            if vlen < -1:
                raise BlobFormatError(f"sink buffer blob {what}: header value length {vlen}")
            h.append((name, None if vlen == -1 else bytes(r.take(vlen, f"{what} value"))))
        headers[i] = h
        last = i
    return headers


def _decode_body_v1(mv: memoryview) -> list[Epoch]:
    end = len(mv)
    pos = 5
    (ntopics,) = _U16.unpack_from(mv, pos)
    pos += 2
    topics: list[str] = []
    for _ in range(ntopics):
        (n,) = _U16.unpack_from(mv, pos)
        pos += 2
        topics.append(bytes(mv[pos : pos + n]).decode())
        pos += n
    (nepochs,) = _U32.unpack_from(mv, pos)
    pos += 4
    unpack_rec, rec_size = _REC.unpack_from, _REC.size
    unpack_hdr, hdr_size = _HDR.unpack_from, _HDR.size
    epochs: list[Epoch] = []
    for _ in range(nepochs):
        cp, nrec = _EPOCH.unpack_from(mv, pos)
        pos += _EPOCH.size
        records: list[OutputRecord] = []
        append = records.append
        for _ in range(nrec):
            flags, ti, part, klen, vlen, ts, nh = unpack_rec(mv, pos)
            pos += rec_size
            key = bytes(mv[pos : pos + klen]) if flags & _F_KEY else None
            pos += klen
            value = bytes(mv[pos : pos + vlen]) if flags & _F_VALUE else None
            pos += vlen
            headers: list[Header] | None = None
            if flags & _F_HEADERS:
                headers = []
                for _ in range(nh):
                    nlen, hvlen = unpack_hdr(mv, pos)
                    pos += hdr_size
                    name = bytes(mv[pos : pos + nlen]).decode()
                    pos += nlen
                    if hvlen < 0:
                        headers.append((name, None))
                    else:
                        headers.append((name, bytes(mv[pos : pos + hvlen])))
                        pos += hvlen
            if pos > end:
                raise BlobFormatError("sink buffer blob record runs past the end")
            append(
                (
                    topics[ti],
                    part if flags & _F_PART else None,
                    key,
                    value,
                    ts if flags & _F_TS else None,
                    headers,
                )
            )
        epochs.append(Epoch(cp, EpochState.SEALED, chunks=[records]))
    if pos != end:
        raise BlobFormatError(f"sink buffer blob has {end - pos} trailing bytes")
    return epochs


def _decode_body_v3(mv: memoryview) -> list[Epoch]:
    r = _Reader(mv, 5)
    (nepochs,) = r.unpack(_U32, "epoch count")
    epochs: list[Epoch] = []
    for _ in range(nepochs):
        cp, nsegments = r.unpack(_EPOCH, "epoch header")
        epoch = Epoch(cp, EpochState.SEALED)
        for _ in range(nsegments):
            records, length = r.unpack(_SEGMENT, f"epoch {cp} segment header")
            data = r.take(length, f"epoch {cp} segment")
            if bytes(data[:4]) != _MAGIC or data[4] != _VERSION:
                raise BlobFormatError(f"sink buffer blob epoch {cp}: a segment is not a v2 blob")
            epoch.add_spilled(MemorySegment(records, data))
        epochs.append(epoch)
    if r.pos != r.end:
        raise BlobFormatError(f"sink buffer blob has {r.end - r.pos} trailing bytes")
    return epochs


_DECODERS = {1: _decode_body_v1, 2: _decode_body_v2, 3: _decode_body_v3}
