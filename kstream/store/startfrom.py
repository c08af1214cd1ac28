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
(:mod:`kstream.plan.compat`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from kstream.config import StartFrom
from kstream.plan.compat import IncompatibleStateError, check_restorable
from kstream.store.base import CheckpointStore, ObjectExists
from kstream.store.layout import import_marker_path
from kstream.store.metadata import (
    CheckpointMetadata,
    MetadataError,
    read_metadata,
    write_metadata,
)
from kstream.store.savepoints import read_savepoint

log = logging.getLogger(__name__)

__all__ = ["check_state", "import_start", "resolve_start", "validate_start"]


def resolve_start(
    store: CheckpointStore, app_id: str, start: StartFrom
) -> tuple[str, CheckpointMetadata]:
    """``(label, metadata)`` of the state ``start`` names; MetadataError if it is not there."""
    if start.savepoint is not None:
        path = start.savepoint.rstrip("/")
        return f"savepoint {path}", read_savepoint(store, path)
    assert start.checkpoint is not None
    app, _, n = start.checkpoint.rpartition(":")
    app = app or app_id
    return f"checkpoint {n} of {app}", read_metadata(store, app, int(n))


def check_state(
    meta: CheckpointMetadata, label: str, description: Mapping[str, Any], allow: bool
) -> None:
    """IncompatibleStateError if ``meta``'s state cannot be restored under the plan
    ``description``. State without a description predates stable operator ids: its
    operators' state is not found under them, so it counts as non-restored state."""
    if meta.description is None:
        if allow:
            return
        raise IncompatibleStateError(
            f"{label} cannot be restored under this topology: it was taken before stable "
            f"operator ids, so its state would not be found (pass --allow-non-restored-state "
            f"to start with empty state at its source positions)"
        )
    check_restorable(meta.description, description, what=label, allow_non_restored_state=allow)


def import_start(
    store: CheckpointStore,
    app_id: str,
    start: StartFrom,
    *,
    next_id: int,
    attempt: int,
    description: Mapping[str, Any],
    now: float,
) -> CheckpointMetadata | None:
    """Import the state ``start`` names as checkpoint ``next_id`` of ``app_id``; None when
    nothing is to be imported (no flag, or already imported once).

    Raises MetadataError (no such state) or IncompatibleStateError (module doc).
    """
    if not start.given:
        return None
    label, source = resolve_start(store, app_id, start)
    key = json.dumps([label, source.checkpoint_id, source.complete_time]).encode()
    marker = import_marker_path(app_id, hashlib.sha256(key).hexdigest()[:24])
    if store.exists(marker):
        log.info("this job already started from %s: continuing from its own checkpoints", label)
        return None
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
        store.put_bytes(marker, json.dumps({"from": label, "as": next_id}).encode(), exclusive=True)
    log.info("starting from %s, imported as checkpoint %d", label, next_id)
    return meta


def validate_start(
    store: CheckpointStore, app_id: str, start: StartFrom, description: Mapping[str, Any]
) -> None:
    """A worker's early check of ``start`` (the coordinator imports it): raises
    IncompatibleStateError if the state does not fit this plan; a state that cannot be
    read is left to the coordinator (it may have been imported and deleted since)."""
    if not start.given:
        return
    try:
        label, source = resolve_start(store, app_id, start)
    except MetadataError as e:
        log.warning("cannot check the state to start from here: %s", e)
        return
    check_state(source, label, description, start.allow_non_restored_state)
