"""Open a checkpoint store by its URL."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlparse

from kstream.checkpointstorage.base import CheckpointStore, StoreError
from kstream.checkpointstorage.file import FileStore
from kstream.checkpointstorage.objectstore import ObjectStore, is_object_store_url


def open_store(url: str, options: Mapping[str, str] | None = None) -> CheckpointStore:
    """Open a store by URL: ``s3://bucket/prefix`` (``gs://``, ``az://``), ``file:///abs/dir``,
    ``file://./rel/dir`` or a plain path. ``options``: object-store settings."""
    parsed = urlparse(url)
    if parsed.scheme in ("", "file"):
        if options:
            raise StoreError(f"store options {sorted(options)} apply to object stores, not {url!r}")
        path = (parsed.netloc + parsed.path) if parsed.scheme == "file" else url
        return FileStore(path)
    if is_object_store_url(url):
        return ObjectStore(url, options)
    raise StoreError(
        f"unsupported checkpoint store URL {url!r}: use s3://bucket/prefix, gs://bucket/prefix, "
        "az://container/prefix or file://dir"
    )
