"""Spilling an exactly-once sink's buffer to local disk past its memory budget.

An epoch's records are spilled as encoded segments (version-2 blobs of one epoch,
:func:`kstream.sinkbuffer.blob.encode_segment`) appended to one spill file per epoch,
under a directory of its own in the task's state directory. Publishing decodes one
segment at a time; the file is deleted once its epoch is committed or dropped. The
snapshot keeps what a spilled buffer holds as a version-3 blob that the upload thread
streams from the spill files (:class:`SegmentedBlob`): the spill files are a cache of
the snapshot, never the durable copy, so crash and restore work as without them.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

from kstream.sinkbuffer.blob import write_segmented_blob
from kstream.sinkbuffer.blobdecode import decode_segment
from kstream.sinkbuffer.epochs import Chunk, Segment

#: The default memory budget of one exactly-once sink task's buffer (``--sink-buffer-memory``).
DEFAULT_MEMORY_BUDGET = 64 * 1024 * 1024


def _pread(fd: int, length: int, offset: int) -> bytes:
    parts: list[bytes] = []
    while length:
        data = os.pread(fd, length, offset)
        if not data:
            raise OSError(f"spill file ends {length} bytes early at offset {offset}")
        parts.append(data)
        length -= len(data)
        offset += len(data)
    return b"".join(parts)


class SpillFile:
    """One epoch's spill file: segments appended, read back by offset, deleted with
    its last segment."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd: int | None = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        self.end = 0
        self.live = 0  # segments not yet released

    def append(self, data: bytes) -> int:
        """Write ``data`` at the end; returns its offset."""
        assert self.fd is not None, "spill file already deleted"
        offset, view = self.end, memoryview(data)
        while view:
            written = os.pwrite(self.fd, view, self.end)
            self.end += written
            view = view[written:]
        self.live += 1
        return offset

    def read(self, offset: int, length: int) -> bytes:
        assert self.fd is not None, "spill file already deleted"
        return _pread(self.fd, length, offset)

    def release_one(self) -> None:
        """A segment is done with; the last one deletes the file."""
        self.live -= 1
        if self.live <= 0:
            self.delete()

    def delete(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
            self.path.unlink(missing_ok=True)


class FileSegment(Segment):
    """A segment in an epoch's spill file."""

    __slots__ = ("file", "length", "offset", "released")

    def __init__(self, file: SpillFile, offset: int, length: int, records: int) -> None:
        super().__init__(records)
        self.file, self.offset, self.length = file, offset, length
        self.released = False

    def encoded(self) -> bytes:
        return self.file.read(self.offset, self.length)

    def load(self) -> Chunk:
        return decode_segment(self.encoded(), self.records)

    def pin(self) -> PinnedSegment:
        """A handle that stays readable after the epoch released this segment (the
        snapshot's upload may outlive the epoch's commit)."""
        assert self.file.fd is not None, "segment already released"
        return PinnedSegment(os.dup(self.file.fd), self.offset, self.length, self.records)

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.file.release_one()


class PinnedSegment(Segment):
    """A spilled segment read through its own file descriptor (closed by ``release``)."""

    __slots__ = ("fd", "length", "offset")

    def __init__(self, fd: int, offset: int, length: int, records: int) -> None:
        super().__init__(records)
        self.fd: int | None = fd
        self.offset, self.length = offset, length

    def encoded(self) -> bytes:
        assert self.fd is not None, "pinned segment already released"
        return _pread(self.fd, self.length, self.offset)

    def load(self) -> Chunk:
        return decode_segment(self.encoded(), self.records)

    def pin(self) -> PinnedSegment:
        assert self.fd is not None, "pinned segment already released"
        return PinnedSegment(os.dup(self.fd), self.offset, self.length, self.records)

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class SegmentedBlob:
    """The snapshot blob of a buffer that spilled: sealed epochs as (checkpoint id,
    segments), written by the upload thread (``write_to``) in blob format version 3."""

    def __init__(self, epochs: Sequence[tuple[int, Sequence[Segment]]]) -> None:
        self.epochs = epochs
        # what write_to writes: frame, epoch headers, segment headers and segments, CRC
        self.size = 13 + sum(12 + sum(12 + _length(s) for s in segs) for _, segs in epochs)

    def write_to(self, out: BinaryIO) -> int:
        """Write the blob to ``out``; returns its size."""
        return write_segmented_blob(out, self.epochs)

    def close(self) -> None:
        """Release the segments' file descriptors (after ``write_to``, or instead of it)."""
        for _, segs in self.epochs:
            for s in segs:
                s.release()


def _length(s: Segment) -> int:
    if isinstance(s, FileSegment | PinnedSegment):
        return s.length
    return len(s.encoded())


class SpillDir:
    """Where one sink instance spills: ``<root>/<pid>-<random>/``, created on first use
    and removed by ``close``. Directories of processes no longer alive are removed when
    an instance starts (a killed worker's spill files are garbage: the snapshot holds
    what they held)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.path = root / f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._files = 0
        if root.is_dir():
            for d in root.iterdir():
                pid = d.name.partition("-")[0]
                if not (pid.isdigit() and _alive(int(pid))):
                    shutil.rmtree(d, ignore_errors=True)

    def new_file(self) -> SpillFile:
        self.path.mkdir(parents=True, exist_ok=True)
        self._files += 1
        return SpillFile(self.path / f"epoch-{self._files}.spill")

    def write(self, data: bytes, records: int, after: Segment | None) -> FileSegment:
        """Spill one segment of an epoch whose last segment so far is ``after``."""
        file = after.file if isinstance(after, FileSegment) and not after.released else None
        if file is None or file.fd is None:
            file = self.new_file()
        offset = file.append(data)
        return FileSegment(file, offset, len(data), records)

    def close(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
