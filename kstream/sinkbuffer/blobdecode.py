"""Decoding the sink blob, every version (pure: no I/O; corrupt bytes are a BlobFormatError)."""

from __future__ import annotations

import io
import struct
import zlib
from array import array
from itertools import repeat
from typing import Any, cast

from kstream.sinkbuffer.blobformat import (
    A_I32,
    A_I64,
    A_U16,
    A_U32,
    CONST,
    EPOCH,
    F_HEADERS,
    F_KEY,
    F_PART,
    F_TS,
    F_VALUE,
    FULL,
    HDR,
    HEADERED,
    MAGIC,
    NONE,
    NULLS,
    REC,
    SEGMENT,
    SWAP,
    U8,
    U16,
    U32,
    U64,
    VERSION,
)
from kstream.sinkbuffer.epochs import (
    BlobFormatError,
    Chunk,
    ColumnBatch,
    Epoch,
    EpochState,
    Header,
    OutputRecord,
    Segment,
)


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


def decode_blob(blob: bytes) -> list[Epoch]:
    """The sealed epochs encoded in ``blob`` (version 1 or 2); BlobFormatError if it is not valid."""
    if len(blob) < len(MAGIC) + 1 + 2 + 4 + 4 or blob[:4] != MAGIC:
        raise BlobFormatError("not a kstream sink buffer blob (bad magic or too short)")
    decode_body = _DECODERS.get(blob[4])
    if decode_body is None:
        raise BlobFormatError(
            f"sink buffer blob version {blob[4]} is not supported (this kstream reads "
            f"versions {', '.join(map(str, _DECODERS))}); was it written by a newer kstream?"
        )
    body = memoryview(blob)[:-4]
    (crc,) = U32.unpack_from(blob, len(blob) - 4)
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
        if SWAP:
            a.byteswap()
        return a.tolist()


def _decode_body_v2(mv: memoryview) -> list[Epoch]:
    r = _Reader(mv, 5)
    (ntopics,) = r.unpack(U16, "topic count")
    names = [
        bytes(r.take(r.unpack(U16, "topic")[0], "topic name")).decode() for _ in range(ntopics)
    ]
    (nepochs,) = r.unpack(U32, "epoch count")
    epochs: list[Epoch] = []
    for _ in range(nepochs):
        cp, n = r.unpack(EPOCH, "epoch header")
        where = f"epoch {cp}"
        topic_mode, column = _read_int_column(r, A_U16, n, f"{where} topic indexes")
        if topic_mode not in (CONST, FULL):
            raise BlobFormatError(
                f"sink buffer blob {where}: topic index column has mode {topic_mode}"
            )
        indexes = cast("list[int]", column)  # CONST and FULL hold no None
        if n and max(indexes[:1] if topic_mode == CONST else indexes) >= ntopics:
            raise BlobFormatError(f"sink buffer blob {where}: topic index beyond {ntopics} topics")
        if topic_mode == FULL:
            topics = list(map(names.__getitem__, indexes))
        else:
            topics = [names[indexes[0]]] * n if n else []
        part_mode, partitions = _read_int_column(r, A_I32, n, f"{where} partitions")
        keys = _read_bytes_column(r, n, f"{where} keys")
        values = _read_bytes_column(r, n, f"{where} values")
        ts_mode, timestamps = _read_int_column(r, A_I64, n, f"{where} timestamps")
        headers = _read_headers(r, n, f"{where} headers")
        chunk: Chunk
        batch = topic_mode == CONST and part_mode == NONE and ts_mode in (CONST, FULL)
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
    (mode,) = r.unpack(U8, what)
    if mode == NONE:
        return mode, [None] * n
    if mode == CONST:
        return mode, cast("list[int | None]", r.ints(code, 1, what) * n)
    if mode not in (FULL, NULLS):
        raise BlobFormatError(f"sink buffer blob {what}: unknown column mode {mode}")
    values = cast("list[int | None]", r.ints(code, n, what))
    if mode == NULLS:
        (nnull,) = r.unpack(U32, f"{what} null count")
        nulls = r.ints(A_U32, nnull, f"{what} null indexes")
        if nulls != sorted(set(nulls)) or (nulls and nulls[-1] >= n):
            raise BlobFormatError(
                f"sink buffer blob {what}: null indexes are not increasing record indexes < {n}"
            )
        for i in nulls:
            values[i] = None
    return mode, values


def _read_bytes_column(r: _Reader, n: int, what: str) -> list[bytes | None]:
    """The ``n`` values (None where null) of a bytes column; lengths must add up exactly."""
    mode, lengths = _read_int_column(r, A_I32, n, f"{what} lengths")
    (size,) = r.unpack(U64, f"{what} size")
    read = io.BytesIO(r.take(size, what)).read  # read(length) of each value, in order
    if mode == NONE:
        if size:
            raise BlobFormatError(f"sink buffer blob {what}: all null but {size} bytes present")
        return [None] * n
    if mode == CONST:
        step = cast(int, lengths[0]) if n else 0
        if step < 0 or step * n != size:
            raise BlobFormatError(
                f"sink buffer blob {what}: {n} x {step} bytes do not make the {size} bytes present"
            )
        return list(map(read, repeat(step, n)))
    if mode == NULLS:
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
    if mode == NULLS:
        out = [None if x is None else v for x, v in zip(lengths, out, strict=True)]
    return out


def _read_headers(r: _Reader, n: int, what: str) -> list[list[Header] | None] | None:
    """The ``n`` records' headers (None for most) from the headers section; ``None`` if
    no record has headers."""
    (count,) = r.unpack(U32, f"{what} count")
    if not count:
        return None
    headers: list[list[Header] | None] = [None] * n
    last = -1
    for _ in range(count):
        i, nh = r.unpack(HEADERED, what)
        if not last < i < n or nh == 0:
            raise BlobFormatError(
                f"sink buffer blob {what}: record {i} with {nh} headers (after record {last}, "
                f"{n} records)"
            )
        h: list[Header] = []
        for _ in range(nh):
            nlen, vlen = r.unpack(HDR, what)
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
    (ntopics,) = U16.unpack_from(mv, pos)
    pos += 2
    topics: list[str] = []
    for _ in range(ntopics):
        (n,) = U16.unpack_from(mv, pos)
        pos += 2
        topics.append(bytes(mv[pos : pos + n]).decode())
        pos += n
    (nepochs,) = U32.unpack_from(mv, pos)
    pos += 4
    unpack_rec, rec_size = REC.unpack_from, REC.size
    unpack_hdr, hdr_size = HDR.unpack_from, HDR.size
    epochs: list[Epoch] = []
    for _ in range(nepochs):
        cp, nrec = EPOCH.unpack_from(mv, pos)
        pos += EPOCH.size
        records: list[OutputRecord] = []
        append = records.append
        for _ in range(nrec):
            flags, ti, part, klen, vlen, ts, nh = unpack_rec(mv, pos)
            pos += rec_size
            key = bytes(mv[pos : pos + klen]) if flags & F_KEY else None
            pos += klen
            value = bytes(mv[pos : pos + vlen]) if flags & F_VALUE else None
            pos += vlen
            headers: list[Header] | None = None
            if flags & F_HEADERS:
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
                    part if flags & F_PART else None,
                    key,
                    value,
                    ts if flags & F_TS else None,
                    headers,
                )
            )
        epochs.append(Epoch(cp, EpochState.SEALED, chunks=[records]))
    if pos != end:
        raise BlobFormatError(f"sink buffer blob has {end - pos} trailing bytes")
    return epochs


def _decode_body_v3(mv: memoryview) -> list[Epoch]:
    r = _Reader(mv, 5)
    (nepochs,) = r.unpack(U32, "epoch count")
    epochs: list[Epoch] = []
    for _ in range(nepochs):
        cp, nsegments = r.unpack(EPOCH, "epoch header")
        epoch = Epoch(cp, EpochState.SEALED)
        for _ in range(nsegments):
            records, length = r.unpack(SEGMENT, f"epoch {cp} segment header")
            data = r.take(length, f"epoch {cp} segment")
            if bytes(data[:4]) != MAGIC or data[4] != VERSION:
                raise BlobFormatError(f"sink buffer blob epoch {cp}: a segment is not a v2 blob")
            epoch.add_spilled(MemorySegment(records, data))
        epochs.append(epoch)
    if r.pos != r.end:
        raise BlobFormatError(f"sink buffer blob has {r.end - r.pos} trailing bytes")
    return epochs


_DECODERS = {1: _decode_body_v1, 2: _decode_body_v2, 3: _decode_body_v3}
