"""Starting a job from a chosen checkpoint or savepoint (``--from-checkpoint``/``--from-savepoint``).

The chosen state is *imported*: its metadata is written into this app as a new
completed checkpoint (the next id), whose task handles name the chosen
manifests where they are (another app's or a savepoint's). The normal restore
path then restores it like any latest checkpoint: state, source positions and
the exactly-once sinks' buffers come from it. A marker
(``<app>/imports/<hash>.json``) makes the import happen once: a restarted
coordinator with the same flag continues from the job's own newer checkpoints
instead of rolling back again.

Before anything is written, the state must be restorable under this plan
(:mod:`kstream.plan.compat`). State whose stages have other partition counts than this
plan's is rescaled first by the ``rescale`` the caller gives (:mod:`kstream.rescale`:
the new tasks' snapshots are written into this app) and the rescaled state is imported.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from kstream.checkpointstorage.base import CheckpointStore, ObjectExists, StoreError
from kstream.checkpointstorage.layout import import_marker_path, imports_prefix
from kstream.checkpointstorage.metadata import (
    CheckpointMetadata,
    MetadataError,
    read_metadata,
    write_metadata,
)
from kstream.checkpointstorage.savepoints import read_savepoint
from kstream.config import StartFrom
from kstream.plan.compat import IncompatibleStateError, changed_partitions, check_restorable

log = logging.getLogger(__name__)

__all__ = ["check_state", "import_start", "pending_import", "resolve_start", "start_label"]


def start_label(app_id: str, start: StartFrom) -> str:
    """How messages name the state ``start`` names: ``savepoint PATH`` or ``checkpoint N of APP``."""
    if start.savepoint is not None:
        return f"savepoint {start.savepoint.rstrip('/')}"
    assert start.checkpoint is not None
    app, _, n = start.checkpoint.rpartition(":")
    return f"checkpoint {n} of {app or app_id}"


def resolve_start(
    store: CheckpointStore, app_id: str, start: StartFrom
) -> tuple[str, CheckpointMetadata]:
    """``(label, metadata)`` of the state ``start`` names; MetadataError if it is not there."""
    label = start_label(app_id, start)
    if start.savepoint is not None:
        return label, read_savepoint(store, start.savepoint.rstrip("/"))
    assert start.checkpoint is not None
    app, _, n = start.checkpoint.rpartition(":")
    return label, read_metadata(store, app or app_id, int(n))


def pending_import(
    store: CheckpointStore, app_id: str, start: StartFrom
) -> tuple[str, CheckpointMetadata] | None:
    """``(label, metadata)`` of the state ``start`` names while it is still to be imported;
    None without a flag or once this app imported it (also when it was deleted since).
    MetadataError if it is not there and never was imported."""
    if not start.given:
        return None
    try:
        label, source = resolve_start(store, app_id, start)
    except MetadataError:
        if _imported_from(store, app_id, start_label(app_id, start)):
            return None
        raise
    return None if store.exists(_marker(app_id, label, source)) else (label, source)


def _marker(app_id: str, label: str, source: CheckpointMetadata) -> str:
    key = json.dumps([label, source.checkpoint_id, source.complete_time]).encode()
    return import_marker_path(app_id, hashlib.sha256(key).hexdigest()[:24])


def _imported_from(store: CheckpointStore, app_id: str, label: str) -> bool:
    """Whether an import marker of ``app_id`` says it started from ``label``."""
    for path in store.list(imports_prefix(app_id)):
        try:
            if json.loads(store.get_bytes(path)).get("from") == label:
                return True
        except (StoreError, ValueError, AttributeError):
            continue
    return False


Rescale = Callable[[CheckpointMetadata, str, dict[str, int]], CheckpointMetadata]
"""``(state, label, stage -> new partition count) -> the rescaled state`` (IncompatibleStateError
where it cannot be rescaled)."""


def check_state(
    meta: CheckpointMetadata,
    label: str,
    description: Mapping[str, Any],
    allow: bool,
    *,
    rescale: bool = False,
) -> None:
    """IncompatibleStateError if ``meta``'s state cannot be restored under the plan
    ``description`` (``rescale``: changed partition counts allowed, the state is to be
    rescaled). State without a description predates stable operator ids: its
    operators' state is not found under them, so it counts as non-restored state."""
    if meta.description is None:
        if allow:
            return
        raise IncompatibleStateError(
            f"{label} cannot be restored under this topology: it was taken before stable "
            f"operator ids, so its state would not be found (pass --allow-non-restored-state "
            f"to start with empty state at its source positions)"
        )
    check_restorable(
        meta.description,
        description,
        what=label,
        allow_non_restored_state=allow,
        rescale=rescale,
    )


def import_start(
    store: CheckpointStore,
    app_id: str,
    start: StartFrom,
    *,
    next_id: int,
    attempt: int,
    description: Mapping[str, Any],
    now: float,
    rescale: Rescale | None = None,
) -> CheckpointMetadata | None:
    """Import the state ``start`` names as checkpoint ``next_id`` of ``app_id``; None when
    nothing is to be imported (no flag, or already imported once).

    Raises MetadataError (no such state) or IncompatibleStateError (module doc).
    """
    pending = pending_import(store, app_id, start)
    if pending is None:
        if start.given:
            log.info(
                "this job already started from %s: continuing from its own checkpoints",
                start_label(app_id, start),
            )
        return None
    label, source = pending
    changed = changed_partitions(source.description or {}, description)
    if changed and rescale is not None:
        check_state(source, label, description, start.allow_non_restored_state, rescale=True)
        log.info("rescaling %s: %s", label, ", ".join(f"{s} to {n}" for s, n in changed.items()))
        source = rescale(source, label, changed)
    check_state(source, label, description, start.allow_non_restored_state)
    # 1. The imported checkpoint (accepted under this plan: it carries this plan's
    #    description); 2. the marker — a crash between them imports again, harmlessly.
    meta = replace(
        source,
        checkpoint_id=next_id,
        attempt=attempt,
        complete_time=now,
        description=dict(description),
        origin=label,
    )
    write_metadata(store, app_id, meta)
    with contextlib.suppress(ObjectExists):
        store.put_bytes(
            _marker(app_id, label, source),
            json.dumps({"from": label, "as": next_id}).encode(),
            exclusive=True,
        )
    log.info("starting from %s, imported as checkpoint %d", label, next_id)
    return meta
