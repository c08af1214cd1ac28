"""Delta snapshots: one checkpoint interval's state changes as a file (docs/design.md §5.5, §8).

A task's snapshot is either *full* (a RocksDB checkpoint, the *base*) or a *delta*
snapshot: the base's files plus, in order, one delta file per checkpoint taken since
it. A delta file holds what the interval changed, by table, in the order it happened:
point writes (the stored key and value bytes, exactly as RocksDB would hold them),
deletions and range deletions. Restoring writes them over the base in file order
(``RocksDBBackend.apply_delta``). A checkpoint then writes only the changed entries
into a file instead of into RocksDB (no memtable flush, no new sorted run, no
compaction every second), and uploads only that file; a full snapshot every so often
(``DeltaPolicy``) bounds what a restore must replay.

File format: b"KSDELTZ1" and the zlib stream (level 1: about a sixth of the size,
compressed on the checkpoint's thread) of (integers big-endian, length arrays
little-endian)::

    b"KSDELTA1"
    records:  0x01 u16 n, table name (UTF-8)         the table of the records after it
              0x02 u32 n, n u32 key lengths, n u32 value lengths, the n keys, the n values
                                                     n writes; an empty value deletes
                                                     (a stored value is never empty)
              0x04 u32 a, u32 b, low, high           delete the keys in [low, high)
    0x00 u64 records                                 end: how many records came before it

A file is checked against its manifest's SHA-256 before it is read; the end record
catches a truncated or malformed file anyway (``DeltaError``). Nothing in it is
executed or unpickled: keys and values are the state's own encodings.
"""

from __future__ import annotations

import os
import shutil
import struct
import sys
import zlib
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import accumulate, islice
from pathlib import Path
from typing import Any

from kstream.state.steps import Steps, drain

MAGIC = b"KSDELTA1"
ZMAGIC = b"KSDELTZ1"  # a delta file: ZMAGIC and the zlib-compressed delta
DIR = "deltas"  # the delta files' subdirectory of a snapshot (and their manifest names' prefix)
SUFFIX = ".kvd"

OP_END, OP_TABLE, OP_PUT, OP_DELETE, OP_RANGE = 0, 1, 2, 3, 4
SPLIT = 4096  # writes of a block split into keys and values at a time (read_delta_blocks)
PIECE = 128 * 1024  # bytes decompressed per step (decompress_steps: about 0.25 ms)
_TABLE = struct.Struct(">BH")
_BLOCK = struct.Struct(">BI")
_RANGE = struct.Struct(">BII")
_END = struct.Struct(">BQ")
if array("I").itemsize != 4:  # pragma: no cover - every platform CPython supports today
    raise ImportError("kstream's delta files need a 4-byte array('I')")


def _lengths(items: list[bytes]) -> bytes:
    a = array("I", map(len, items))
    if sys.byteorder == "big":
        a.byteswap()
    return a.tobytes()


def _read_lengths(data: memoryview) -> array[int]:
    a = array("I")
    a.frombytes(data)
    if sys.byteorder == "big":
        a.byteswap()
    return a


class DeltaError(ValueError):
    """A delta file is malformed (truncated, an unknown record); the message says where."""


@dataclass(frozen=True)
class DeltaPolicy:
    """When a checkpoint writes a full snapshot instead of a delta.

    Full when there is no base yet, when ``max_files`` deltas follow the base, or when
    the deltas since the base would exceed ``max(min_bytes, ratio * base size)``: a
    restore replays at most that much (about a microsecond an entry). (The backend
    also takes a full one when cache flushes wrote more than a cache's worth of
    entries to RocksDB since the last snapshot.)
    """

    max_files: int = 60
    min_bytes: int = 8 << 20
    ratio: float = 0.5

    def allows(self, files: int, delta_bytes: int, base_bytes: int) -> bool:
        """Whether a delta may follow ``files`` deltas of ``delta_bytes`` in all
        (this one included) on a base of ``base_bytes``."""
        return files <= self.max_files and delta_bytes <= max(
            self.min_bytes, self.ratio * base_bytes
        )


class DeltaWriter:
    """Builds one delta file in memory (``data``); the caller writes it out."""

    __slots__ = ("parts", "records")

    def __init__(self) -> None:
        self.parts: list[bytes] = [MAGIC]
        self.records = 0

    def table(self, name: str) -> None:
        raw = name.encode()
        self.parts += (_TABLE.pack(OP_TABLE, len(raw)), raw)
        self.records += 1

    def writes(self, keys: list[bytes], values: list[bytes]) -> None:
        """Write ``values[i]`` under ``keys[i]``; an empty value deletes the key."""
        if keys:
            self.parts += (
                _BLOCK.pack(OP_PUT, len(keys)),
                _lengths(keys),
                _lengths(values),
                b"".join(keys),
                b"".join(values),
            )
            self.records += 1

    def delete_range(self, low: bytes, high: bytes) -> None:
        self.parts += (_RANGE.pack(OP_RANGE, len(low), len(high)), low, high)
        self.records += 1

    def data(self) -> bytes:
        """The whole file, end record included."""
        return b"".join([*self.parts, _END.pack(OP_END, self.records)])


def compress(data: bytes) -> bytes:
    """A delta file's content for the delta ``data`` (``DeltaWriter.data``)."""
    return ZMAGIC + zlib.compress(data, 1)


def decompress(content: bytes, where: str) -> bytes:
    """The delta in a delta file's ``content``; DeltaError naming ``where`` if it is not one."""
    return drain(decompress_steps(content, where, 0))


def decompress_steps(content: bytes, where: str, piece: int = PIECE) -> Steps[bytes]:
    """``decompress`` in steps of at most ``piece`` bytes decompressed (0: one step)."""
    if not content.startswith(ZMAGIC):
        raise DeltaError(f"{where}: not a delta file (no {ZMAGIC!r} header)")
    z = zlib.decompressobj()
    parts: list[bytes] = []
    rest: bytes | memoryview = memoryview(content)[len(ZMAGIC) :]
    try:
        while True:
            parts.append(z.decompress(rest, piece))
            rest = z.unconsumed_tail
            if not rest:
                break
            yield
        parts.append(z.flush())
    except zlib.error as e:
        raise DeltaError(f"{where}: corrupt compressed delta: {e}") from e
    if not z.eof:
        raise DeltaError(f"{where}: corrupt compressed delta: incomplete or truncated stream")
    return b"".join(parts)


def read_delta(data: bytes, where: str) -> Iterator[tuple[str, int, bytes, bytes]]:
    """The changes of a delta (``decompress``) as (table, ``OP_PUT``/``OP_DELETE``/``OP_RANGE``,
    key or low, value or high; b"" for a delete), in order; DeltaError naming ``where`` if
    it is malformed (only once the generator reached its end)."""
    for _, table, op, a, b in read_delta_blocks(data, where):
        if op == OP_RANGE:
            yield table, OP_RANGE, a, b
        else:
            for key, value in zip(a, b, strict=True):
                yield table, OP_PUT if value else OP_DELETE, key, value


def read_delta_blocks(
    data: bytes, where: str, split: int = SPLIT
) -> Iterator[tuple[int, str, int, Any, Any]]:
    """The records of a delta, in order: (its index, table, ``OP_PUT``, the keys, the
    values: b"" deletes) for a block of writes (split without a Python step per entry,
    ``split`` at a time: a block may come as several with the same index),
    (index, table, ``OP_RANGE``, low, high) for a range deletion; DeltaError as
    ``read_delta``."""
    if not data.startswith(MAGIC):
        raise DeltaError(f"{where}: not a delta file (no {MAGIC!r} header)")
    view = memoryview(data)
    pos, end, count = len(MAGIC), len(data), 0
    table: str | None = None
    cut = data.__getitem__
    try:
        while True:
            op = data[pos]
            if op == OP_END:
                (n,) = _END.unpack_from(data, pos)[1:]
                if n != count or pos + _END.size != end:
                    raise DeltaError(f"{where}: end record says {n} records, read {count}")
                return
            if op == OP_TABLE:
                _, n = _TABLE.unpack_from(data, pos)
                pos += _TABLE.size
                table = str(view[pos : pos + n], "utf-8")
                pos += n
            elif table is None:
                raise DeltaError(f"{where}: a record before the first table at byte {pos}")
            elif op == OP_PUT:
                _, n = _BLOCK.unpack_from(data, pos)
                pos += _BLOCK.size
                klens = _read_lengths(view[pos : pos + 4 * n])
                vlens = _read_lengths(view[pos + 4 * n : pos + 8 * n])
                pos += 8 * n
                if len(klens) != n or len(vlens) != n:
                    raise DeltaError(f"{where}: a block of {n} writes runs past the end")
                kpos = pos
                vpos = kpos + sum(klens)
                pos = vpos + sum(vlens)
                if pos > end:
                    raise DeltaError(f"{where}: a block of {n} writes runs past the end")
                for at in range(0, n, split):  # (a reading thread gets the GIL between)
                    ks = list(accumulate(klens[at : at + split], initial=kpos))
                    vs = list(accumulate(vlens[at : at + split], initial=vpos))
                    kpos, vpos = ks[-1], vs[-1]
                    keys = list(map(cut, map(slice, ks, islice(ks, 1, None))))
                    values = list(map(cut, map(slice, vs, islice(vs, 1, None))))
                    yield count, table, OP_PUT, keys, values
            elif op == OP_RANGE:
                _, a, b = _RANGE.unpack_from(data, pos)
                pos += _RANGE.size
                low, high = data[pos : pos + a], data[pos + a : pos + a + b]
                pos += a + b
                if pos > end:
                    raise DeltaError(f"{where}: a range deletion runs past the end")
                yield count, table, OP_RANGE, low, high
            else:
                raise DeltaError(f"{where}: unknown record type {op} at byte {pos}")
            count += 1
    except DeltaError:
        raise
    except (IndexError, ValueError, struct.error, UnicodeDecodeError) as e:
        raise DeltaError(f"{where}: truncated or malformed at byte {pos}: {e}") from e


class DeltaChain:
    """A task's base — the files of its last full snapshot, hard links in
    ``<path>/base`` — and the delta files taken since, in ``<path>/deltas``.

    ``sequence`` is the base's RocksDB sequence number (None: no base, the next
    snapshot is full). An earlier run's chain is deleted on open: the live DB it
    started from may have moved on since. The backend calls ``set_base`` and
    ``write_snapshot`` on its checkpoint thread, everything else on the task's.
    """

    def __init__(self, path: Path, policy: DeltaPolicy | None = None) -> None:
        self.base_dir = path / "base"
        self.delta_dir = path / DIR
        self.policy = policy or DeltaPolicy()
        for d in (self.base_dir, self.delta_dir):
            shutil.rmtree(d, ignore_errors=True)
        self.sequence: int | None = None
        self.base_bytes = 0
        self.files: list[str] = []
        self.delta_bytes = 0

    def allows(self, size: int) -> bool:
        """Whether the next snapshot may be a delta of ``size`` bytes."""
        return self.sequence is not None and self.policy.allows(
            len(self.files) + 1, self.delta_bytes + size, self.base_bytes
        )

    def start(self, sequence: int) -> None:
        """A full snapshot at RocksDB ``sequence`` is the new base (``set_base`` follows)."""
        self.sequence, self.files, self.delta_bytes, self.base_bytes = sequence, [], 0, 0

    def drop(self) -> None:
        """No base any more (a snapshot failed): the next one is full."""
        self.sequence = None

    def add(self, size: int) -> tuple[str, list[str]]:
        """Name a new delta file of ``size`` bytes; it and every delta file since the base."""
        name = f"{len(self.files) + 1:06d}{SUFFIX}"
        self.files.append(name)
        self.delta_bytes += size
        return name, list(self.files)

    def set_base(self, checkpoint: Path) -> None:
        """Link the full snapshot in ``checkpoint`` as the base; no deltas follow it yet."""
        fresh = self.base_dir.with_name("base.new")
        shutil.rmtree(fresh, ignore_errors=True)
        fresh.mkdir(parents=True)
        size = 0
        for f in checkpoint.iterdir():
            if f.is_file():
                os.link(f, fresh / f.name)
                size += f.stat().st_size
        shutil.rmtree(self.base_dir, ignore_errors=True)
        fresh.rename(self.base_dir)
        shutil.rmtree(self.delta_dir, ignore_errors=True)
        self.delta_dir.mkdir(parents=True)
        self.base_bytes = size

    def write_snapshot(
        self, target: Path, files: list[str], name: str | None, data: bytes | None
    ) -> None:
        """Write delta ``name`` (None: nothing changed), then the snapshot ``target``:
        links to the base's files and to ``files`` under ``deltas/``."""
        if name is not None and data is not None:
            tmp = self.delta_dir / (name + ".tmp")
            tmp.write_bytes(compress(data))
            tmp.rename(self.delta_dir / name)
        (target / DIR).mkdir(parents=True)
        for f in self.base_dir.iterdir():
            os.link(f, target / f.name)
        for n in files:
            os.link(self.delta_dir / n, target / DIR / n)
