"""Savepoints: completed checkpoints kept outside retention (paths: :mod:`kstream.checkpointstorage.layout`).

A savepoint is made from a completed checkpoint by copying its task manifests to
``<app>/savepoints/<name>/tasks/`` and then writing its metadata (handles pointing
at the copies) exclusively, last: a savepoint whose metadata exists is whole. The
manifests' shared files stay where they are (``<app>/shared``); retention keeps
every file a savepoint manifest names (:mod:`kstream.snapshots.retention`), and
deleting a savepoint lets the next retention pass collect what only it needed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from kstream.checkpointstorage.base import CheckpointStore, ObjectExists, StoreError
from kstream.checkpointstorage.layout import (
    savepoint_manifest_path,
    savepoint_metadata_path,
    savepoint_of,
    savepoint_path,
    savepoints_prefix,
)
from kstream.checkpointstorage.metadata import CheckpointMetadata, MetadataError

log = logging.getLogger(__name__)

__all__ = [
    "SavepointInfo",
    "create_savepoint",
    "delete_savepoint",
    "is_savepoint_manifest",
    "list_savepoints",
    "read_savepoint",
]


@dataclass(frozen=True)
class SavepointInfo:
    """One savepoint: its path and the checkpoint it was made from."""

    path: str
    metadata: CheckpointMetadata

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


def create_savepoint(
    store: CheckpointStore, app_id: str, name: str, meta: CheckpointMetadata
) -> str:
    """Make savepoint ``name`` of ``app_id`` from completed checkpoint ``meta``; its path.

    ``ObjectExists`` if a savepoint of that name exists.
    """
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"invalid savepoint name {name!r}")
    path = savepoint_path(app_id, name)
    # Refused before copying: the copies would overwrite that savepoint's manifests, which
    # retention caches while the savepoint's metadata is unchanged (snapshots.retention_cache).
    if store.exists(savepoint_metadata_path(path)):
        raise ObjectExists(f"savepoint {path} exists; choose another name or delete it first")
    tasks = {}
    # 1. The task manifests (the shared files they name are already in the store).
    for task_id, snap in sorted(meta.tasks.items()):
        copy = savepoint_manifest_path(path, task_id)
        if snap.handle:
            store.put_bytes(copy, store.get_bytes(snap.handle))
        tasks[task_id] = replace(snap, handle=copy if snap.handle else "")
    # 2. The metadata last and exclusively: once it exists the savepoint is whole.
    body = replace(meta, tasks=tasks, origin=meta.origin)
    store.put_bytes(savepoint_metadata_path(path), body.to_json(), exclusive=True)
    return path


def read_savepoint(store: CheckpointStore, path: str) -> CheckpointMetadata:
    """The metadata of the savepoint at ``path``; MetadataError if there is none."""
    path = path.rstrip("/")
    where = savepoint_metadata_path(path)
    try:
        data = store.get_bytes(where)
    except StoreError as e:
        raise MetadataError(f"no savepoint at {store.url}/{path}: {e}") from e
    return CheckpointMetadata.from_json(data, where=f"{store.url}/{where}")


def list_savepoints(store: CheckpointStore, app_id: str) -> list[SavepointInfo]:
    """Every whole savepoint of ``app_id``, oldest checkpoint first."""
    out = []
    for p in store.list(savepoints_prefix(app_id)):
        sp = savepoint_of(p)
        if sp is None:
            continue
        try:
            out.append(SavepointInfo(sp, read_savepoint(store, sp)))
        except MetadataError as e:
            log.warning("skipping savepoint %s: %s", sp, e)
    return sorted(out, key=lambda s: (s.metadata.checkpoint_id, s.path))


def is_savepoint_manifest(path: str) -> bool:
    """Whether ``path``, listed under an app's savepoints, is a task manifest of one."""
    return "/tasks/" in path and path.endswith(".json")


def delete_savepoint(store: CheckpointStore, path: str) -> int:
    """Delete the savepoint at ``path`` (metadata first, so it is never half there); the
    number of files deleted. Its shared files go with the app's next retention pass."""
    path = path.rstrip("/")
    read_savepoint(store, path)  # MetadataError: nothing to delete
    store.delete(savepoint_metadata_path(path))
    n = 1
    for p in store.list(path):
        store.delete(p)
        n += 1
    return n
