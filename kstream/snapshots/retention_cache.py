"""What retention has read before: so a pass after each checkpoint reads only what is new.

Retention needs what every retained checkpoint's metadata names (task manifests) and
what every remaining manifest names (shared files). Read from the store on every pass
that is O(tasks x retained checkpoints) requests per checkpoint — at 100 000 tasks far
more work than the checkpoint itself. What it reads does not change once written:

* a completed checkpoint's metadata is created exclusively and never rewritten
  (:func:`kstream.checkpointstorage.metadata.write_metadata`), and checkpoint ids are
  never reused (a coordinator continues above every id the control topic and the store
  know), so the manifests checkpoint ``n`` names are cached by ``n``;
* a task manifest ``<app>/tasks/<task>/chk-<n>.<writer>.json`` (or ``final-<n>``; older
  versions wrote no ``<writer>``) is written once, by that incarnation of the task at
  checkpoint ``n``, after every file it names is in the store
  (:mod:`kstream.snapshots.upload`), so what it names is cached by its path;
* a savepoint's manifests are copies written before its metadata, and a savepoint name
  can be deleted and made again from another checkpoint: their cache entries hold only
  while the savepoint's metadata is byte-for-byte the one seen when they were read (one
  read per savepoint per pass). Manifests of a savepoint without metadata (being made,
  or being deleted) and manifests under other labels are read on every pass.

Memory stays bounded by what the store holds: each pass drops the entries of
checkpoints no longer retained and of manifests no longer listed. A new cache (a
coordinator restart) makes the first pass a full scan again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from kstream.checkpointstorage.base import CheckpointStore, StoreError
from kstream.checkpointstorage.layout import (
    numbered_manifest,
    savepoint_metadata_path,
    savepoint_of,
    savepoints_prefix,
)
from kstream.checkpointstorage.savepoints import is_savepoint_manifest

#: How a manifest's cache entry is validated: ``""`` — immutable, valid while listed;
#: a digest — valid while its savepoint's metadata has that digest; None — never cached.
Validator = str | None


class RetentionCache:
    """Manifests named by completed checkpoints, and shared files named by manifests."""

    def __init__(self) -> None:
        self._checkpoints: dict[int, frozenset[str]] = {}
        self._manifests: dict[str, tuple[str, frozenset[str]]] = {}

    def checkpoint(self, checkpoint_id: int) -> frozenset[str] | None:
        """The manifests completed checkpoint ``checkpoint_id`` names, if read before."""
        return self._checkpoints.get(checkpoint_id)

    def remember_checkpoint(self, checkpoint_id: int, handles: frozenset[str]) -> None:
        self._checkpoints[checkpoint_id] = handles

    def keep_checkpoints(self, ids: Iterable[int]) -> None:
        """Forget every checkpoint but ``ids`` (the retained ones)."""
        keep = set(ids)
        self._checkpoints = {n: h for n, h in self._checkpoints.items() if n in keep}

    def manifest(self, path: str, validator: Validator) -> frozenset[str] | None:
        """The shared files manifest ``path`` names, if read before and still valid."""
        if validator is None:
            return None
        entry = self._manifests.get(path)
        return entry[1] if entry is not None and entry[0] == validator else None

    def remember_manifest(self, path: str, validator: Validator, refs: frozenset[str]) -> None:
        if validator is None:
            self._manifests.pop(path, None)
        else:
            self._manifests[path] = (validator, refs)

    def keep_manifests(self, paths: Iterable[str]) -> None:
        """Forget every manifest but ``paths`` (the ones the store still lists)."""
        keep = set(paths)
        self._manifests = {p: e for p, e in self._manifests.items() if p in keep}

    def __len__(self) -> int:
        """Entries held: checkpoints plus manifests."""
        return len(self._checkpoints) + len(self._manifests)


def task_manifest_validator(path: str) -> Validator:
    """``""`` for a numbered (``chk-<n>``/``final-<n>``) task manifest, written once;
    None for any other label."""
    return "" if numbered_manifest(path) is not None else None


def savepoint_manifest_validators(store: CheckpointStore, app_id: str) -> dict[str, Validator]:
    """Every manifest of every savepoint of ``app_id`` (whole or being written, as
    :func:`kstream.checkpointstorage.savepoints.is_savepoint_manifest`), with the digest of
    its savepoint's metadata (None when there is none or it cannot be read)."""
    listed = store.list(savepoints_prefix(app_id))
    whole = {sp for sp in map(savepoint_of, listed) if sp is not None}
    digests: dict[str, Validator] = {}
    for sp in whole:
        try:
            digests[sp] = hashlib.sha256(store.get_bytes(savepoint_metadata_path(sp))).hexdigest()
        except StoreError:
            digests[sp] = None  # deleted meanwhile: read its manifests uncached
    return {p: digests.get(p.rsplit("/tasks/", 1)[0]) for p in listed if is_savepoint_manifest(p)}
