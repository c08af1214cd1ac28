"""A worker's batch of snapshots on the wire in columns (``AcknowledgeCheckpoints``). Pure.

``{"task": [ids], "handle": [...], "offsets": [...], ...}``: a list per
:class:`~kstream.checkpointstorage.metadata.TaskSnapshot` field, in the order of the
task ids, not an object per task. At 100 000 tasks a checkpoint's acknowledgements are
20 MB, not 32 MB, and the coordinator parses and checks them in about half the CPU (a
column's values checked by one loop in C, issue 41). The object-per-task form of earlier
versions (``"snapshots"``) is still read (:func:`kstream.protocol.messages.decode`).

Decoding checks every value as strictly as :mod:`kstream.protocol.fields` does: each
field's column present, of the tasks' length, of its type (an int where a float is due
is taken as a float); anything else raises :class:`~kstream.protocol.fields.FieldError`.
"""

from __future__ import annotations

from typing import Any

from kstream.checkpointstorage.metadata import SNAPSHOT_FIELDS as FIELDS
from kstream.checkpointstorage.metadata import TaskSnapshot, snapshot_columns
from kstream.protocol.fields import FieldError

_TYPES: dict[str, type] = {
    "handle": str,
    "offsets": dict,  # a JSON object: string keys, JSON values (any position's shape)
    "state_size": int,
    "uploaded_size": int,
    "alignment_ms": float,
    "sync_ms": float,
    "async_ms": float,
    "ack_delay_ms": float,
    "member": str,
}


def to_columns(snapshots: dict[str, TaskSnapshot]) -> dict[str, list[Any]]:
    """``snapshots`` (task -> snapshot) as columns, as the metadata writes them."""
    return snapshot_columns(snapshots)


def from_columns(value: Any, where: str) -> dict[str, TaskSnapshot]:
    """What :func:`to_columns` wrote, every value checked; FieldError naming ``where``."""
    if type(value) is not dict:
        raise FieldError(f"{where}: {value!r:.80} is not an object of columns")
    if value.keys() != {"task", *FIELDS}:
        want = sorted({"task", *FIELDS})
        raise FieldError(f"{where}: columns {sorted(value)}, expected {want}")
    ids = value["task"]
    if type(ids) is not list:
        raise FieldError(f"{where}.task: {ids!r:.80} is not a list of task ids")
    _check(ids, str, len(ids), f"{where}.task")
    columns = [_check(value[name], _TYPES[name], len(ids), f"{where}.{name}") for name in FIELDS]
    new = object.__new__
    out: dict[str, TaskSnapshot] = {}
    for task, row in zip(ids, zip(*columns, strict=True), strict=True):
        snap = new(TaskSnapshot)  # (as TaskSnapshot.delayed: no setattr per field)
        snap.__dict__.update(zip(FIELDS, row, strict=True))
        out[task] = snap
    return out


def _check(column: Any, kind: type, length: int, where: str) -> list[Any]:
    """``column``, a list of ``length`` values of exactly ``kind`` (ints as floats for a
    float); FieldError naming the first value that is not."""
    if type(column) is not list or len(column) != length:
        raise FieldError(f"{where}: not a list of {length} values (one per task)")
    kinds = set(map(type, column))  # (in C: a generator per column cost twice as much)
    if kinds <= {kind}:
        return column
    if kind is float and kinds <= {int, float}:
        return [float(v) for v in column]
    bad = next(v for v in column if type(v) is not kind)
    raise FieldError(f"{where}: {bad!r:.80} is not {kind.__name__}")
