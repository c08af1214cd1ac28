"""Every path of one app's layout in the checkpoint store (``<app>/`` prefix).

``<app>/shared/<sha256>``
    Content-addressed immutable files: RocksDB SSTs and the small per-checkpoint
    files (MANIFEST, OPTIONS, CURRENT, ...), and extra blobs (e.g. a sink's
    write-ahead buffer). A file the store already holds is never uploaded again:
    SSTs are immutable, so an unchanged SST has the same hash in every checkpoint.
``<app>/tasks/<task_id>/<label>.json``
    Per-task manifest (:mod:`kstream.snapshots.upload`). ``label`` is ``chk-<n>`` for
    checkpoint n, ``final-<n>`` for a bounded run's n-th final state, or a
    caller-given label for a savepoint. Written LAST and atomically, after every
    file it names is in the store: a manifest that exists names a complete snapshot.
``<app>/checkpoints/chk-<n>.json``
    Completed checkpoint n's metadata (:mod:`kstream.checkpointstorage.metadata`), written by
    the coordinator; it names each task's manifest. A checkpoint is complete iff it
    exists.
``<app>/checkpoints/index.json``
    The ids of the newest completed checkpoints (:mod:`kstream.checkpointstorage.metadata`): how
    readers find checkpoints without listing the store. The one object that is
    rewritten, and only as a hint: every id it names is verified by its metadata.
``<app>/history/chk-<n>.json``, ``<app>/history/attempt-<k>.json``
    Failed or aborted checkpoint n, and why attempt k started
    (:mod:`kstream.checkpointstorage.history`): informational records written by the coordinator,
    read by ``kstream checkpoints list`` and ``kstream status``; the newest few kept.

``<app>/savepoints/<name>/_metadata.json``, ``<app>/savepoints/<name>/tasks/<task_id>.json``
    Savepoint ``name`` (:mod:`kstream.checkpointstorage.savepoints`): a completed checkpoint
    kept outside retention — copies of its task manifests (their shared files stay
    in ``<app>/shared``, which retention keeps while a savepoint names them) and its
    metadata, written last. ``<app>/savepoints/<name>`` is the savepoint's path.
``<app>/imports/<sha256>.json``
    Written once when a job first starts from a given checkpoint or savepoint
    (``--from-checkpoint``/``--from-savepoint``), so a restarted coordinator does not
    roll the job back to it again.
``<app>/plans/<digest>.json``
    The description (per-part hashes) of a plan fingerprint
    (:mod:`kstream.plan.fingerprint`), written by every process at start, so a
    process refusing another's plan can say what differs.

``<app>/control.key``
    The key coordinators sign their control messages with
    (:mod:`kstream.checkpointstorage.controlkey`): created once, exclusively, never changed.

Nothing else builds or parses these paths.
"""

from __future__ import annotations

import re

CHECKPOINT_LABEL = "chk"
FINAL_LABEL = "final"

_NUMBERED = re.compile(r"^(chk|final)-(\d+)(?:\.[0-9a-f]+)?\.json$")
_NUMBERED_LABEL = re.compile(r"^(chk|final)-\d+$")


def shared_prefix(app_id: str) -> str:
    """Folder of the content-addressed files."""
    return f"{app_id}/shared"


def shared_path(app_id: str, sha256: str) -> str:
    """Store path of the content-addressed file with hash ``sha256``."""
    return f"{shared_prefix(app_id)}/{sha256}"


def tasks_prefix(app_id: str) -> str:
    """Folder of every task's manifests."""
    return f"{app_id}/tasks"


def task_prefix(app_id: str, task_id: str) -> str:
    """Folder of task ``task_id``'s manifests."""
    return f"{tasks_prefix(app_id)}/{task_id}"


def snapshot_label(kind: str, n: int) -> str:
    """The label of a numbered snapshot: ``chk-<n>`` or ``final-<n>``."""
    return f"{kind}-{n}"


def manifest_path(app_id: str, task_id: str, label: str, writer: str = "") -> str:
    """Store path of task ``task_id``'s manifest for snapshot ``label``; a numbered one
    (``chk-<n>``, ``final-<n>``) also names its ``writer`` (an uploader's own id, hex:
    ``chk-<n>.<writer>.json``). Two incarnations of a task that snapshot the same
    checkpoint — a zombie and the worker that adopted the task from it — write two
    manifests, and a checkpoint's metadata names the one the coordinator counted: one
    can never replace the other (docs/design.md §6.8)."""
    name = f"{label}.{writer}" if writer and _NUMBERED_LABEL.match(label) else label
    return f"{task_prefix(app_id, task_id)}/{name}.json"


def numbered_manifest(path: str) -> tuple[str, int] | None:
    """``(kind, n)`` of a ``chk-<n>``/``final-<n>`` manifest path (with its writer's id or,
    as older versions wrote them, without); None for other labels."""
    m = _NUMBERED.match(path.rsplit("/", 1)[-1])
    return (m.group(1), int(m.group(2))) if m else None


def checkpoints_prefix(app_id: str) -> str:
    """Folder of completed checkpoints' metadata."""
    return f"{app_id}/checkpoints"


def metadata_path(app_id: str, checkpoint_id: int) -> str:
    """Store path of checkpoint ``checkpoint_id``'s metadata."""
    return f"{checkpoints_prefix(app_id)}/{snapshot_label(CHECKPOINT_LABEL, checkpoint_id)}.json"


def index_path(app_id: str) -> str:
    """Store path of the index of the newest completed checkpoint ids (a hint, rewritten)."""
    return f"{checkpoints_prefix(app_id)}/index.json"


def metadata_id(path: str) -> int | None:
    """The checkpoint id of a metadata path (``.../chk-<n>.json``); None for anything else."""
    numbered = numbered_manifest(path)
    return numbered[1] if numbered and numbered[0] == CHECKPOINT_LABEL else None


HISTORY_CHECKPOINT, HISTORY_ATTEMPT = "chk", "attempt"
_HISTORY = re.compile(r"^(chk|attempt)-(\d+)\.json$")


def history_prefix(app_id: str) -> str:
    """Folder of the failed/aborted checkpoint and restart records."""
    return f"{app_id}/history"


def history_path(app_id: str, kind: str, n: int) -> str:
    """Store path of history record ``kind`` (chk | attempt) number ``n``."""
    return f"{history_prefix(app_id)}/{kind}-{n}.json"


def history_record(path: str) -> tuple[str, int] | None:
    """``(kind, n)`` of a history record path; None for anything else."""
    m = _HISTORY.match(path.rsplit("/", 1)[-1])
    return (m.group(1), int(m.group(2))) if m else None


def savepoints_prefix(app_id: str) -> str:
    """Folder of every savepoint of ``app_id``."""
    return f"{app_id}/savepoints"


def savepoint_path(app_id: str, name: str) -> str:
    """The path of savepoint ``name`` (what ``--from-savepoint`` takes)."""
    return f"{savepoints_prefix(app_id)}/{name}"


def savepoint_metadata_path(path: str) -> str:
    """The metadata file of the savepoint at ``path``."""
    return f"{path}/_metadata.json"


def savepoint_manifest_path(path: str, task_id: str) -> str:
    """Task ``task_id``'s manifest in the savepoint at ``path``."""
    return f"{path}/tasks/{task_id}.json"


def savepoint_of(path: str) -> str | None:
    """The savepoint path a ``.../_metadata.json`` path belongs to; None for other files."""
    head, _, tail = path.rpartition("/")
    return head if tail == "_metadata.json" else None


def imports_prefix(app_id: str) -> str:
    """Folder of ``app_id``'s import markers."""
    return f"{app_id}/imports"


def import_marker_path(app_id: str, digest: str) -> str:
    """The marker of ``app_id`` having started from the state with hash ``digest``."""
    return f"{imports_prefix(app_id)}/{digest}.json"


def plan_path(app_id: str, digest: str) -> str:
    """Store path of the description of plan fingerprint ``digest``."""
    return f"{app_id}/plans/{digest}.json"


def control_key_path(app_id: str) -> str:
    """Store path of the key that signs the coordinator's control messages."""
    return f"{app_id}/control.key"
