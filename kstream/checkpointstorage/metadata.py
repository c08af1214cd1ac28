"""Completed-checkpoint metadata: ``<app>/checkpoints/chk-<n>.json`` in the checkpoint store.

A metadata file exists only for a completed checkpoint. It is written by the
coordinator exclusively (never overwritten, docs/design.md §5.9) BEFORE
``CheckpointCompleted(n)`` is announced, so a reader that sees the announcement
always finds the file. It lists, per task, the snapshot handle (manifest path),
input offsets, sizes and the task's alignment/sync/async times.

Finding checkpoints never lists the store (listing is slow and may lag on object
stores): after each metadata file the coordinator rewrites the small index
(:func:`kstream.checkpointstorage.layout.index_path`) with the ids of the newest completed
checkpoints. The index is a hint, not the truth: a reader verifies every id it
names by its metadata, and adds the ids the control topic names (a coordinator
that died between the metadata and the index leaves its checkpoint announced or in
flight there). Only garbage collection and ``kstream checkpoints list`` list the
store (:func:`completed_ids`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any

from kstream.checkpointstorage.base import CheckpointStore, StoreError
from kstream.checkpointstorage.layout import (
    checkpoints_prefix,
    index_path,
    metadata_id,
    metadata_path,
    numbered_manifest,
)

log = logging.getLogger(__name__)

INDEX_LENGTH = 32  # ids kept in the index: more than any sensible number of retained checkpoints


class MetadataError(StoreError):
    """A metadata file is missing, unreadable or not valid checkpoint metadata."""


INDENTED_TASKS = 1000  # metadata of more tasks is written without indentation


@dataclass(frozen=True)
class TaskSnapshot:
    """One task's part of a completed checkpoint: its snapshot as the task acknowledged it
    (``AcknowledgeCheckpoint.snapshot``), plus the delay of that acknowledgement."""

    handle: str
    offsets: dict[str, Any] = field(default_factory=dict)
    state_size: int = 0
    uploaded_size: int = 0
    alignment_ms: float = 0.0
    sync_ms: float = 0.0
    async_ms: float = 0.0
    ack_delay_ms: float = 0.0  # from trigger to the acknowledgement reaching the coordinator
    member: str = ""

    def delayed(self, ack_delay_ms: float) -> TaskSnapshot:
        """A copy with ``ack_delay_ms`` set: the coordinator's record of an acknowledgement.
        (Filled as ``__init__`` would, without its ``object.__setattr__`` per field: a
        copy per task per checkpoint, 100 000 at a time — dataclasses.replace was a third
        of a checkpoint's coordinator CPU, ``__init__`` a tenth, issue 41.)"""
        copy = object.__new__(TaskSnapshot)
        own = copy.__dict__
        own.update(self.__dict__)
        own["ack_delay_ms"] = ack_delay_ms
        return copy


@dataclass(frozen=True)
class CheckpointMetadata:
    """A completed checkpoint: what a restore needs plus its statistics. Times are epoch seconds."""

    checkpoint_id: int
    attempt: int
    trigger_time: float
    complete_time: float
    tasks: dict[str, TaskSnapshot]
    # What the plan's state means (kstream.plan.operators.describe); None: not recorded.
    description: dict[str, Any] | None = None
    origin: str | None = None  # the checkpoint/savepoint this one was imported from
    plan: str | None = None  # the plan fingerprint's digest (None: taken before fingerprints)

    @property
    def duration_ms(self) -> float:
        """Time from trigger to the last acknowledgement."""
        return (self.complete_time - self.trigger_time) * 1000.0

    @property
    def state_size(self) -> int:
        """Full state size in bytes, summed over tasks."""
        return sum(map(_STATE_SIZE, self.tasks.values()))

    @property
    def uploaded_size(self) -> int:
        """Bytes uploaded for this checkpoint (incremental), summed over tasks."""
        return sum(map(_UPLOADED_SIZE, self.tasks.values()))

    def to_json(self) -> bytes:
        """The file content (stable key order). Up to ``INDENTED_TASKS`` tasks indented,
        human-readable, each task's snapshot an object under ``tasks``; past that — written
        by the coordinator at every checkpoint — not indented and in columns (``task_columns``:
        the task ids under ``task``, and a list per snapshot field in that order):
        at 100 000 tasks 20 MB in 0.14 s of CPU, not an object per task's 31 MB in 0.35 s
        (Python's indenting encoder: 1.3 s; issue 41)."""
        body: dict[str, Any] = {
            "checkpoint_id": self.checkpoint_id,
            "attempt": self.attempt,
            "trigger_time": self.trigger_time,
            "complete_time": self.complete_time,
            "duration_ms": round(self.duration_ms, 3),
            "state_size": self.state_size,
            "uploaded_size": self.uploaded_size,
        }
        if len(self.tasks) <= INDENTED_TASKS:
            # (vars, not asdict: nothing nested to convert, and asdict's deep copy of
            # every task's offsets cost a second at 100 000 tasks)
            body["tasks"] = {name: vars(t) for name, t in self.tasks.items()}  # (sorted)
        else:
            body["task_columns"] = snapshot_columns(self.tasks)
        if self.description is not None:
            body["description"] = self.description
        if self.origin is not None:
            body["origin"] = self.origin
        if self.plan is not None:
            body["plan"] = self.plan
        indent = 1 if len(self.tasks) <= INDENTED_TASKS else None
        return json.dumps(body, indent=indent, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes, where: str = "metadata") -> CheckpointMetadata:
        """Parse a metadata file (either layout of its tasks); MetadataError naming
        ``where`` if it is not valid."""
        try:
            obj = json.loads(data)
            if "task_columns" in obj:
                tasks = _from_columns(obj["task_columns"])
            else:
                tasks = {str(k): TaskSnapshot(**v) for k, v in obj["tasks"].items()}
            return cls(
                checkpoint_id=int(obj["checkpoint_id"]),
                attempt=int(obj["attempt"]),
                trigger_time=float(obj["trigger_time"]),
                complete_time=float(obj["complete_time"]),
                tasks=tasks,
                description=dict(obj["description"]) if obj.get("description") else None,
                origin=str(obj["origin"]) if obj.get("origin") else None,
                plan=str(obj["plan"]) if obj.get("plan") is not None else None,
            )
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise MetadataError(f"{where} is not valid checkpoint metadata: {e}") from e


SNAPSHOT_FIELDS = tuple(f.name for f in fields(TaskSnapshot))
_STATE_SIZE, _UPLOADED_SIZE = attrgetter("state_size"), attrgetter("uploaded_size")


def snapshot_columns(tasks: dict[str, TaskSnapshot]) -> dict[str, list[Any]]:
    """``tasks`` as columns: the ids under ``task`` in ``tasks``' order (not sorted: at
    100 000 tasks sorting doubled the time), a list per snapshot field (the metadata's
    ``task_columns``, and an ``AcknowledgeCheckpoints`` on the wire)."""
    rows = [vars(t) for t in tasks.values()]
    return {"task": list(tasks), **{name: [r[name] for r in rows] for name in SNAPSHOT_FIELDS}}


def _from_columns(columns: dict[str, Any]) -> dict[str, TaskSnapshot]:
    """What ``snapshot_columns`` wrote; ValueError, TypeError or KeyError if it is not that."""
    ids = columns["task"]
    names = [n for n in columns if n != "task"]
    values = [columns[n] for n in names]
    if any(len(v) != len(ids) for v in values):
        raise ValueError("task_columns are not all of the same length")
    rows = zip(ids, *values, strict=True)
    return {str(t): TaskSnapshot(**dict(zip(names, row, strict=True))) for t, *row in rows}


def write_metadata(
    store: CheckpointStore, app_id: str, meta: CheckpointMetadata, *, index: bool = True
) -> str:
    """Create the metadata file exclusively (ObjectExists if that id was already completed),
    then (``index``) add its id to the index; the coordinator adds it later, off the
    checkpoint's critical path (``add_to_index``)."""
    path = metadata_path(app_id, meta.checkpoint_id)
    # 1. The metadata, exclusively: it alone makes the checkpoint complete.
    store.put_bytes(path, meta.to_json(), exclusive=True)
    if index:
        add_to_index(store, app_id, [meta.checkpoint_id])
    return path


def add_to_index(store: CheckpointStore, app_id: str, ids: Iterable[int]) -> None:
    """Add completed checkpoints ``ids`` to the index. It is a hint for readers: failing
    to write it is logged and only delays what they learn from it (they also check the
    ids the control topic names: the newest announced one and those triggered after it)."""
    ids = list(ids)
    try:
        merged = sorted({*read_index(store, app_id), *ids})[-INDEX_LENGTH:]
        store.put_bytes(index_path(app_id), json.dumps({"completed": merged}).encode())
    except StoreError as e:
        log.warning("checkpoints %s: updating the index failed: %s", ids, e)


def read_index(store: CheckpointStore, app_id: str) -> list[int]:
    """Ids the index names (unverified), ascending; [] if there is no valid index."""
    try:
        data = store.get_bytes(index_path(app_id))
    except StoreError as e:
        if not isinstance(e.__cause__, FileNotFoundError):
            raise
        return []
    try:
        return sorted({int(n) for n in json.loads(data)["completed"]})
    except (ValueError, KeyError, TypeError) as e:
        log.error("ignoring invalid checkpoint index %s/%s: %s", store.url, index_path(app_id), e)
        return []


def known_completed(
    store: CheckpointStore, app_id: str, candidates: Iterable[int] = ()
) -> list[int]:
    """Ids of completed checkpoints among the index and ``candidates``, ascending, without
    listing the store: each id is checked by the existence of its metadata."""
    ids = {*read_index(store, app_id), *candidates}
    return sorted(n for n in ids if store.exists(metadata_path(app_id, n)))


def read_metadata(store: CheckpointStore, app_id: str, checkpoint_id: int) -> CheckpointMetadata:
    """Metadata of completed checkpoint ``checkpoint_id``; MetadataError if absent or invalid."""
    path = metadata_path(app_id, checkpoint_id)
    try:
        data = store.get_bytes(path)
    except StoreError as e:
        raise MetadataError(f"checkpoint {checkpoint_id} of {app_id!r}: {e}") from e
    return CheckpointMetadata.from_json(data, where=f"{store.url}/{path}")


def task_manifests(
    store: CheckpointStore, app_id: str, checkpoint_id: int | None
) -> dict[str, str]:
    """The manifest of every task completed checkpoint ``checkpoint_id`` holds (None:
    none), by task id; a task it does not hold is absent (a new task starts empty). One
    read of its metadata for them all (a worker restoring 512 tasks read and decoded the
    metadata of 2 048 once per task: 44 % of its restore)."""
    if checkpoint_id is None:
        return {}
    tasks = read_metadata(store, app_id, checkpoint_id).tasks
    return {task: snap.handle for task, snap in tasks.items() if snap.handle}


def completion_backing(
    store: CheckpointStore, app_id: str, checkpoint_id: int, attempt: int, plan: str
) -> CheckpointMetadata | str:
    """The metadata backing a ``CheckpointCompleted(checkpoint_id, attempt)`` seen by a
    process running ``plan`` (a fingerprint; '': any), or why the store does not back it:
    its metadata must be there, of that attempt and plan (docs/design.md §12: the control
    topic carries no authority, the store does)."""
    try:
        meta = read_metadata(store, app_id, checkpoint_id)
    except MetadataError as e:
        return f"no valid metadata in the store ({e})"
    if meta.attempt != attempt:
        return f"its metadata is of attempt {meta.attempt}, the message says {attempt}"
    if meta.plan is not None and plan and meta.plan != plan:
        return f"it was taken with plan {meta.plan}, ours is {plan}"
    return meta


def carried_tasks(meta: CheckpointMetadata) -> frozenset[str]:
    """The tasks of ``meta`` whose snapshot is of another checkpoint: carried at an older
    snapshot while their worker was silent (kstream.protocol.carrying). Their output is
    not this checkpoint's to publish."""
    own = meta.checkpoint_id
    return frozenset(
        task
        for task, snapshot in meta.tasks.items()
        if (n := numbered_manifest(snapshot.handle)) is not None and n[1] != own
    )


def completed_ids(store: CheckpointStore, app_id: str) -> list[int]:
    """Ids of every checkpoint with a metadata file, ascending."""
    ids = []
    for path in store.list(checkpoints_prefix(app_id)):
        n = metadata_id(path)
        if n is not None:
            ids.append(n)
    return sorted(ids)


def list_checkpoints(store: CheckpointStore, app_id: str) -> list[CheckpointMetadata]:
    """Every readable completed checkpoint, ascending; unreadable files are logged and skipped."""
    return readable_checkpoints(store, app_id, completed_ids(store, app_id))


def readable_checkpoints(
    store: CheckpointStore, app_id: str, ids: Iterable[int]
) -> list[CheckpointMetadata]:
    """The metadata of completed checkpoints ``ids``, in their order; unreadable ones are
    logged and skipped."""
    out = []
    for n in ids:
        try:
            out.append(read_metadata(store, app_id, n))
        except MetadataError as e:
            log.warning("skipping checkpoint %d: %s", n, e)
    return out


def latest_completed(
    store: CheckpointStore, app_id: str, known: Iterable[int] | None = None
) -> CheckpointMetadata | None:
    """The newest readable completed checkpoint among ``known`` (default: the index's), or
    None (restore to start positions)."""
    ids = known_completed(store, app_id) if known is None else sorted(known)
    for n in reversed(ids):
        try:
            return read_metadata(store, app_id, n)
        except MetadataError as e:
            log.error("checkpoint %d is unreadable, falling back to an older one: %s", n, e)
    return None


def purgeable_offsets(retained: list[CheckpointMetadata]) -> dict[tuple[str, int], int]:
    """Per internal-topic partition, the offset below which no retained checkpoint reads.

    An internal partition's position is recorded per upstream task (a dict); a restore
    seeks to the smallest of them. Records below the smallest such seek over every
    retained checkpoint are never needed again (docs/design.md §2). A partition missing from
    any retained checkpoint is left alone.
    """
    if not retained:
        return {}
    per_checkpoint: list[dict[tuple[str, int], int]] = []
    for meta in retained:
        seeks: dict[tuple[str, int], int] = {}
        for snap in meta.tasks.values():
            for key, pos in snap.offsets.items():
                if isinstance(pos, dict) and pos:
                    topic, _, part = key.rpartition(":")
                    seeks[(topic, int(part))] = min(int(v) for v in pos.values())
        per_checkpoint.append(seeks)
    common = set(per_checkpoint[0]).intersection(*per_checkpoint[1:])
    return {tp: min(c[tp] for c in per_checkpoint) for tp in sorted(common)}
