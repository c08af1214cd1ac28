"""Open a checkpoint store by its URL."""

from __future__ import annotations

from urllib.parse import urlparse

from kstream.store.base import CheckpointStore, StoreError
from kstream.store.file import FileStore


def open_store(url: str) -> CheckpointStore:
    """Open a store by URL: ``file:///abs/dir``, ``file://./rel/dir`` or a plain path."""
    parsed = urlparse(url)
    if parsed.scheme in ("", "file"):
        path = (parsed.netloc + parsed.path) if parsed.scheme == "file" else url
        return FileStore(path)
    raise StoreError(
        f"unsupported checkpoint store URL {url!r}: only file:// is built in "
        "(an S3-compatible store is an adapter implementing CheckpointStore)"
    )
