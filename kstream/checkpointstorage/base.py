"""The checkpoint store's interface: where snapshots and checkpoint metadata live.

A store is a flat namespace of immutable objects addressed by '/'-separated
paths, with the few operations an object store (S3 and compatibles) also has, so
an S3 adapter is a new class, not a rewrite:

* writes are atomic: a reader sees the whole object or nothing (temp + rename
  on a file system, single PUT on an object store);
* ``exclusive=True`` refuses to overwrite (checkpoint metadata is created
  exclusively, never overwritten — docs/design.md §5.9);
* no rename of directories, no appends.

Every path of one app's layout (``<app>/`` prefix) is built in
:mod:`kstream.checkpointstorage.layout`; adapters: :mod:`kstream.checkpointstorage.file` (``file://``), opened
by URL with :func:`kstream.checkpointstorage.urls.open_store`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path


class StoreError(RuntimeError):
    """A checkpoint store operation failed; the message names the path.

    ``object`` is the full name (``<store url>/<path>``) of the object concerned when
    the operation was about one object, so a restore that fails can name exactly
    what is corrupt or missing, whatever the adapter.
    """

    def __init__(self, message: str, *, object: str | None = None) -> None:
        super().__init__(message)
        self.object = object


class ObjectExists(StoreError):
    """An exclusive write found the object already present."""


class ObjectNotFound(StoreError):
    """The object does not exist (``object`` names it)."""


class CheckpointStore(ABC):
    """Interface of a checkpoint store (see module docstring)."""

    url: str
    concurrency: int = 4  # parallel transfers of a worker's snapshot uploads and restores

    @abstractmethod
    def put_bytes(self, path: str, data: bytes, *, exclusive: bool = False) -> None:
        """Atomically write ``data`` at ``path``; ``exclusive`` raises ObjectExists if present."""

    @abstractmethod
    def put_file(self, path: str, local: Path) -> None:
        """Atomically upload the local file ``local`` to ``path``."""

    @abstractmethod
    def get_bytes(self, path: str) -> bytes:
        """The object at ``path``; StoreError (FileNotFoundError cause) if absent."""

    @abstractmethod
    def get_file(self, path: str, local: Path) -> None:
        """Download ``path`` into the local file ``local`` (written atomically)."""

    @abstractmethod
    def exists(self, path: str) -> bool:
        """Whether an object is stored at ``path``."""

    @abstractmethod
    def size(self, path: str) -> int:
        """Size in bytes of the object at ``path``."""

    @abstractmethod
    def list(self, prefix: str) -> list[str]:
        """Paths of every object under ``prefix`` (a folder-like prefix), sorted."""

    @abstractmethod
    def delete(self, path: str) -> None:
        """Delete ``path``; deleting an absent object is not an error."""

    @abstractmethod
    def mtime(self, path: str) -> float:
        """Last-modified time (epoch seconds) of ``path``; used by GC grace periods."""

    def touch(self, path: str) -> None:  # noqa: B027 - optional
        """Refresh ``path``'s modification time (a reused shared file is 'young' again)."""
