"""The versioned blob format of sealed sink epochs in a task's snapshot: encoding (pure: no I/O); the layout is in :mod:`kstream.sinkbuffer.blobformat`, decoding in :mod:`kstream.sinkbuffer.blobdecode`."""

from __future__ import annotations

import zlib
from array import array
from collections.abc import Iterable, Sequence
from typing import Any, BinaryIO, cast

from kstream.sinkbuffer.blobformat import (
    A_I32,
    A_I64,
    A_U16,
    A_U32,
    CONST,
    EPOCH,
    FIELDS,
    FULL,
    HDR,
    HEADERED,
    MAGIC,
    MODE,
    NONE,
    NULLS,
    SEGMENT,
    SWAP,
    U16,
    U32,
    U64,
    VERSION,
)
from kstream.sinkbuffer.epochs import (
    Chunk,
    ColumnBatch,
    Epoch,
    EpochState,
    Header,
    Segment,
    SinkError,
    SinkStateError,
)


def encode_blob(epochs: Iterable[Epoch]) -> bytes:
    """Encode sealed epochs (checkpoint id + records) in blob format version 2."""
    epochs = list(epochs)
    topics: dict[str, int] = {}
    out: list[bytes] = []
    for e in epochs:
        if e.state is not EpochState.SEALED or e.checkpoint_id is None:
            raise SinkStateError(f"only sealed epochs go into a blob, got {e.state}")
        out.append(EPOCH.pack(e.checkpoint_id, e.size))
        _epoch_columns(e.chunks, e.size, topics, out)
    head = [MAGIC, bytes([VERSION]), U16.pack(len(topics))]
    for name in topics:
        nb = name.encode()
        head.append(U16.pack(len(nb)))
        head.append(nb)
    head.append(U32.pack(len(epochs)))
    body = b"".join(head + out)
    return body + U32.pack(zlib.crc32(body))


def encode_segment(chunks: list[Chunk]) -> bytes:
    """Chunks of one epoch as a segment: a version-2 blob of one epoch with id 0."""
    return encode_blob([Epoch(0, EpochState.SEALED, chunks=chunks)])


def write_segmented_blob(out: BinaryIO, epochs: Sequence[tuple[int, Sequence[Segment]]]) -> int:
    """Write sealed epochs, each as (checkpoint id, segments), to ``out`` in blob format
    version 3, one segment in memory at a time; returns the bytes written."""
    crc, size = 0, 0

    def put(data: bytes) -> None:
        nonlocal crc, size
        out.write(data)
        crc = zlib.crc32(data, crc)
        size += len(data)

    put(MAGIC + bytes([3]) + U32.pack(len(epochs)))
    for checkpoint_id, segments in epochs:
        put(EPOCH.pack(checkpoint_id, len(segments)))
        for seg in segments:
            data = seg.encoded()
            put(SEGMENT.pack(seg.records, len(data)))
            put(data)
    out.write(U32.pack(crc))
    return size + 4


def _epoch_columns(chunks: list[Chunk], n: int, topics: dict[str, int], out: list[bytes]) -> None:
    """Append the version-2 columns of an epoch's ``n`` records in ``chunks`` to ``out``,
    numbering new topics in ``topics`` as first seen.

    Column batches are never taken apart record by record: their lists are
    concatenated, and their partitions and headers (all ``None``) are not looked at.
    """
    topic_of = FIELDS[0]
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
        out += (MODE[CONST], U16.pack(topics[cast(str, per_chunk[0])]))  # the usual case
    else:
        indexes: list[int] = []
        for c, t in zip(chunks, per_chunk, strict=True):
            if isinstance(t, str):
                indexes += [topics[t]] * len(c)
            else:
                indexes += map(topics.__getitem__, t)
        _int_column(indexes, A_U16, out)
    batches = n > 0 and all(isinstance(c, ColumnBatch) for c in chunks)
    if batches:
        out.append(MODE[NONE])  # partitions
    else:
        _int_column(_gather(chunks, 1), A_I32, out)
    _bytes_column(_gather(chunks, 2), out)
    _bytes_column(_gather(chunks, 3), out)
    _int_column(_gather(chunks, 4), A_I64, out)
    if batches:
        out.append(U32.pack(0))  # no record has headers
    else:
        _headers_section(_gather(chunks, 5), out)


def _gather(chunks: list[Chunk], field: int) -> list[Any]:
    """Field ``field`` (an ``OutputRecord`` index) of every record in ``chunks``, in order.

    A single column batch's own list is returned as it is (callers only read it).
    """
    if len(chunks) == 1 and isinstance(chunks[0], ColumnBatch) and 2 <= field <= 4:
        return _batch_column(chunks[0], field)
    values: list[Any] = []
    get = FIELDS[field]
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
    if SWAP:
        a.byteswap()
    return a.tobytes()


def _int_column(values: list[Any], code: str, out: list[bytes]) -> None:
    """Append ``values`` (ints or None) to ``out`` as an integer column of ``array`` type ``code``."""
    n = len(values)
    try:
        col = array(code, values)
    except TypeError:  # a None among them (anything else fails again below)
        if values.count(None) == n:
            out.append(MODE[NONE])
            return
        nulls = [i for i, v in enumerate(values) if v is None]
        col = array(code, [0 if v is None else v for v in values])
        out += (MODE[NULLS], _le(col), U32.pack(len(nulls)), _le(array(A_U32, nulls)))
        return
    if n and col.tobytes() == col[:1].tobytes() * n:
        out += (MODE[CONST], _le(col[:1]))
    else:
        out += (MODE[FULL], _le(col))


def _bytes_column(values: list[Any], out: list[bytes]) -> None:
    """Append ``values`` (bytes or None) to ``out``: their lengths, total size, concatenation."""
    try:
        data = b"".join(values)
        lengths: list[int | None] = list(map(len, values))
    except TypeError:  # a None among them (anything else fails again below)
        data = b"".join([v for v in values if v is not None])
        lengths = [None if v is None else len(v) for v in values]
    _int_column(lengths, A_I32, out)
    out += (U64.pack(len(data)), data)


def _headers_section(headers: list[list[Header] | None], out: list[bytes]) -> None:
    """Append the records that have headers (rare) to ``out``: count, then index and headers."""
    if headers.count(None) == len(headers):
        out.append(U32.pack(0))
        return
    rows = [(i, h) for i, h in enumerate(headers) if h]
    out.append(U32.pack(len(rows)))
    for i, h in rows:
        out.append(HEADERED.pack(i, len(h)))
        for name, value in h:
            nb = name.encode()
            out += (HDR.pack(len(nb), -1 if value is None else len(value)), nb)
            if value:
                out.append(value)
