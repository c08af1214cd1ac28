"""The job's history besides completed checkpoints: failed and aborted checkpoints and
restarts, as small JSON records in the checkpoint store under ``<app>/history/``.

``chk-<n>.json`` describes checkpoint *n* that failed (it counts towards
``tolerable_failures``: a timeout, a decline, a failed metadata write) or was
aborted (subsumed by a newer completion, cancelled by a failover): why, when, and
which tasks had acknowledged with their statistics. ``attempt-<k>.json`` says why
attempt *k* was started. The coordinator writes them; ``kstream checkpoints list``
and ``kstream status`` read them.

They live in the store, next to the completed checkpoints, rather than only on the
control topic: the store is where a reader of the checkpoint history already looks,
it keeps what a ``CheckpointAborted`` message does not carry (trigger time, the tasks
that had acknowledged and their durations), and it is not cut short by control-topic
retention. These records are informational: nothing reads them to decide anything,
a failed write is logged and skipped, and only the newest :data:`KEEP` of each kind
are kept.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from typing import Any

from kstream.checkpointstorage.base import CheckpointStore, StoreError
from kstream.checkpointstorage.layout import (
    HISTORY_ATTEMPT,
    HISTORY_CHECKPOINT,
    history_path,
    history_prefix,
    history_record,
)
from kstream.checkpointstorage.metadata import TaskSnapshot

log = logging.getLogger(__name__)

KEEP = 50


class CheckpointStatus:
    """How a checkpoint ended (the ``status`` of a record)."""

    COMPLETED = "completed"
    FAILED = "failed"  # counts towards tolerable_failures
    ABORTED = "aborted"  # subsumed or cancelled by a failover: not a failure


@dataclass(frozen=True)
class CheckpointFailure:
    """A checkpoint that did not complete. Times are epoch seconds."""

    checkpoint_id: int
    attempt: int
    status: str  # CheckpointStatus.FAILED | ABORTED
    reason: str
    trigger_time: float
    end_time: float
    tasks: dict[str, TaskSnapshot] = field(default_factory=dict)  # acknowledged before the end
    missing: tuple[str, ...] = ()

    @property
    def duration_ms(self) -> float:
        return (self.end_time - self.trigger_time) * 1000.0

    def to_json(self) -> bytes:
        body = asdict(self)
        body["missing"] = list(self.missing)
        return json.dumps(body, indent=1, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> CheckpointFailure:
        obj = json.loads(data)
        return cls(
            checkpoint_id=int(obj["checkpoint_id"]),
            attempt=int(obj["attempt"]),
            status=str(obj["status"]),
            reason=str(obj["reason"]),
            trigger_time=float(obj["trigger_time"]),
            end_time=float(obj["end_time"]),
            tasks={str(k): TaskSnapshot(**v) for k, v in obj.get("tasks", {}).items()},
            missing=tuple(str(t) for t in obj.get("missing", ())),
        )


@dataclass(frozen=True)
class RestartRecord:
    """Attempt ``attempt`` was started at ``time`` to restore ``checkpoint_id``, because ``reason``."""

    attempt: int
    time: float
    reason: str
    checkpoint_id: int | None

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), indent=1, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> RestartRecord:
        obj = json.loads(data)
        n = obj.get("checkpoint_id")
        return cls(
            attempt=int(obj["attempt"]),
            time=float(obj["time"]),
            reason=str(obj["reason"]),
            checkpoint_id=None if n is None else int(n),
        )


def _records(store: CheckpointStore, app_id: str, kind: str) -> list[tuple[int, str]]:
    out = []
    for path in store.list(history_prefix(app_id)):
        rec = history_record(path)
        if rec is not None and rec[0] == kind:
            out.append((rec[1], path))
    return sorted(out)


def _write(store: CheckpointStore, app_id: str, kind: str, n: int, data: bytes) -> None:
    """Write one record and keep the newest KEEP of its kind; a store error is logged."""
    try:
        store.put_bytes(history_path(app_id, kind, n), data)
        for _n, path in _records(store, app_id, kind)[:-KEEP]:
            store.delete(path)
    except (StoreError, OSError) as e:
        log.warning("checkpoint history: writing %s-%d failed (history only): %s", kind, n, e)


def record_failure(store: CheckpointStore, app_id: str, failure: CheckpointFailure) -> None:
    """Store ``failure`` as ``<app>/history/chk-<n>.json`` (best effort)."""
    _write(store, app_id, HISTORY_CHECKPOINT, failure.checkpoint_id, failure.to_json())


def record_restart(store: CheckpointStore, app_id: str, restart: RestartRecord) -> None:
    """Store ``restart`` as ``<app>/history/attempt-<k>.json`` (best effort)."""
    _write(store, app_id, HISTORY_ATTEMPT, restart.attempt, restart.to_json())


def _read_all(store: CheckpointStore, app_id: str, kind: str, parse: Any) -> list[Any]:
    out = []
    for _n, path in _records(store, app_id, kind):
        try:
            out.append(parse(store.get_bytes(path)))
        except (StoreError, ValueError, KeyError, TypeError) as e:
            log.warning("skipping unreadable history record %s: %s", path, e)
    return out


def list_failures(store: CheckpointStore, app_id: str) -> list[CheckpointFailure]:
    """Failed and aborted checkpoints still in the history, ascending by id."""
    failures: list[CheckpointFailure] = _read_all(
        store, app_id, HISTORY_CHECKPOINT, CheckpointFailure.from_json
    )
    return failures


def list_restarts(store: CheckpointStore, app_id: str) -> list[RestartRecord]:
    """Restarts still in the history, ascending by attempt."""
    restarts: list[RestartRecord] = _read_all(
        store, app_id, HISTORY_ATTEMPT, RestartRecord.from_json
    )
    return restarts


def failure_of(store: CheckpointStore, app_id: str, checkpoint_id: int) -> CheckpointFailure | None:
    """The history record of checkpoint ``checkpoint_id``, or None."""
    try:
        return CheckpointFailure.from_json(
            store.get_bytes(history_path(app_id, HISTORY_CHECKPOINT, checkpoint_id))
        )
    except (StoreError, ValueError, KeyError, TypeError):
        return None
