"""Retention and garbage collection of one app's checkpoints in the store (docs/design.md §8).

``apply_retention`` keeps the newest ``retained`` completed checkpoints and
deletes, in this order (so a crash part-way leaves only garbage a later run
finds again, never a dangling reference):

1. metadata of older completed checkpoints;
2. task manifests (``chk-<n>``) with ``n`` below the newest completed checkpoint
   that no retained checkpoint references — non-retained or aborted checkpoints.
   Manifests at or above it (in flight) and savepoint manifests (other labels,
   and ``<app>/savepoints/``) are kept;
3. shared files no remaining manifest references and whose modification time is
   older than ``grace_seconds``.

Why the grace period makes GC safe against a concurrent upload: an uploader
*touches* every shared file it reuses before it writes the manifest that
references it (``kstream.snapshots.upload``). GC reads the manifests first and
checks a candidate's age immediately before deleting it, so a file reused by an
upload whose manifest GC did not see has been touched and is young. The one
remaining interleaving — GC read the file's age just before the touch and deletes
it just after — is healed by the uploader, which checks after writing its
manifest that every file it references exists and uploads any that vanished.

If any metadata or manifest cannot be read, GC deletes no manifest or shared
file in that run (it cannot know what they reference) and reports why — except a
manifest of no retained checkpoint that vanished between the listing and its read: a
concurrent run (the coordinator that took over from this one) deleted it as garbage,
so it references nothing any more.

Cost: a pass lists the app's checkpoints, task manifests, savepoints and shared files,
deletes what it deletes, and reads the metadata of the retained checkpoints and every
remaining manifest — O(tasks x retained checkpoints) reads. Given a
:class:`~kstream.snapshots.retention_cache.RetentionCache` kept across passes (the
coordinator's), it reads only what it has not read before (what it reads never changes
once written; see that module): after one more checkpoint, that checkpoint's metadata and
its tasks' new manifests (plus each savepoint's metadata), O(tasks).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kstream.checkpointstorage.base import CheckpointStore, ObjectNotFound, StoreError
from kstream.checkpointstorage.layout import (
    CHECKPOINT_LABEL,
    metadata_path,
    numbered_manifest,
    shared_prefix,
    tasks_prefix,
)
from kstream.checkpointstorage.metadata import MetadataError, completed_ids, read_metadata
from kstream.snapshots.retention_cache import (
    RetentionCache,
    Validator,
    savepoint_manifest_validators,
    task_manifest_validator,
)
from kstream.snapshots.upload import read_manifest

log = logging.getLogger(__name__)

DEFAULT_GRACE_SECONDS = 600.0


@dataclass
class RetentionReport:
    """What one retention run kept and deleted (store paths)."""

    retained: list[int] = field(default_factory=list)
    deleted_metadata: list[str] = field(default_factory=list)
    deleted_manifests: list[str] = field(default_factory=list)
    deleted_files: list[str] = field(default_factory=list)
    kept_young_files: list[str] = field(default_factory=list)
    bytes_freed: int = 0
    errors: list[str] = field(default_factory=list)


def apply_retention(
    store: CheckpointStore,
    app_id: str,
    retained: int,
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
    *,
    clock: Callable[[], float] = time.time,
    young: dict[str, float] | None = None,
    cache: RetentionCache | None = None,
) -> RetentionReport:
    """Keep the last ``retained`` completed checkpoints; delete what nothing needs.

    Never deletes a file that a retained checkpoint, an in-flight checkpoint or a
    savepoint references (see the module docstring for the concurrency argument).
    ``clock`` must be the store's clock (file mtimes) — wall time by default.

    ``young``: kept by a caller that runs this after every checkpoint, the modification
    times of unreferenced shared files found younger than the grace period: such a file
    is not asked again until its grace period ends (a reuse's touch only makes it
    younger). Without it every run asks the store for the age of every young file —
    a checkpoint's worth of files per interval for ``grace_seconds``: thousands.

    ``cache``: kept by the same caller, what earlier runs read from checkpoint metadata and
    manifests, so this run reads only what is new (module docstring, "Cost"). Without it
    every run reads everything: O(tasks x retained) reads.
    """
    if retained < 1:
        raise ValueError(f"retained must be >= 1, got {retained}")
    report = RetentionReport()
    ids = completed_ids(store, app_id)
    keep = ids[-retained:]
    report.retained = list(keep)
    newest = keep[-1] if keep else None
    cache = cache if cache is not None else RetentionCache()  # a new one: a full scan
    cache.keep_checkpoints(keep)

    # 0. What the retained checkpoints reference.
    referenced_manifests: set[str] = set()
    for n in keep:
        handles = cache.checkpoint(n)
        if handles is None:
            try:
                meta = read_metadata(store, app_id, n)
            except MetadataError as e:
                report.errors.append(f"retained checkpoint {n} unreadable: {e}")
                continue
            handles = frozenset(t.handle for t in meta.tasks.values() if t.handle)
            cache.remember_checkpoint(n, handles)
        referenced_manifests |= handles

    if report.errors:
        log.error("checkpoint GC of %s deletes nothing: %s", app_id, "; ".join(report.errors))
        return report

    # 1. Older completed checkpoints' metadata.
    for n in ids[: len(ids) - len(keep)]:
        path = metadata_path(app_id, n)
        store.delete(path)
        report.deleted_metadata.append(path)

    # 2. Manifests of non-retained and aborted checkpoints.
    remaining: dict[str, Validator] = {}
    for path in store.list(tasks_prefix(app_id)):
        numbered = numbered_manifest(path)
        garbage = (
            numbered is not None
            and numbered[0] == CHECKPOINT_LABEL
            and newest is not None
            and numbered[1] < newest
            and path not in referenced_manifests
        )
        if garbage:
            store.delete(path)
            report.deleted_manifests.append(path)
        else:
            remaining[path] = task_manifest_validator(path)
    # Savepoints are outside retention: their manifests only ever add references.
    remaining.update(savepoint_manifest_validators(store, app_id))
    cache.keep_manifests(remaining)

    # 3. Shared files no remaining manifest references, once past the grace period.
    referenced: set[str] = set()
    for path, validator in remaining.items():
        refs = cache.manifest(path, validator)
        if refs is None:
            try:
                refs = frozenset(read_manifest(store, path).shared_paths())
            except ObjectNotFound:
                if path not in referenced_manifests:
                    # Deleted since the listing, as garbage, by another run (the
                    # coordinator that took over): it references nothing any more.
                    log.debug("manifest %s deleted during this run", path)
                    continue
                report.errors.append(f"manifest {path} of a retained checkpoint is missing")
                continue
            except (StoreError, ValueError) as e:
                report.errors.append(f"manifest {path} unreadable: {e}")
                continue
            cache.remember_manifest(path, validator, refs)
        referenced |= refs
    if report.errors:
        log.error(
            "checkpoint GC of %s keeps all shared files: %s", app_id, "; ".join(report.errors)
        )
        return report
    seen = young if young is not None else {}
    listed = set()
    for path in store.list(shared_prefix(app_id)):
        listed.add(path)
        if path in referenced:
            seen.pop(path, None)
            continue
        known = seen.get(path)
        if known is not None and clock() - known < grace_seconds:
            report.kept_young_files.append(path)  # young when last asked: still young
            continue
        try:
            size = store.size(path)
            # Age checked right before the delete: a concurrent upload touches reused files.
            mtime = store.mtime(path)
            if clock() - mtime < grace_seconds:
                seen[path] = mtime
                report.kept_young_files.append(path)
                continue
        except StoreError:
            continue  # deleted meanwhile
        seen.pop(path, None)
        store.delete(path)
        report.deleted_files.append(path)
        report.bytes_freed += size
    for path in [p for p in seen if p not in listed]:
        del seen[path]  # gone from the store
    return report
