"""What a starting coordinator recovers before its loop (docs/design.md §5): the control
topic's history read to its end (by the caller) and the checkpoint store's completed
checkpoints — ids continue above every id either of them has seen, and a lost
announcement is repeated — then the plan published and the state the job starts from
(``job.start``'s checkpoint or savepoint imported, or the latest completed checkpoint)
checked against the plan.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from kstream.checkpointstorage.base import CheckpointStore
from kstream.checkpointstorage.metadata import (
    known_completed,
    latest_completed,
    readable_checkpoints,
)
from kstream.checkpointstorage.plans import publish_plan
from kstream.checkpointstorage.startfrom import check_state, import_start
from kstream.config import JobConfig
from kstream.kafka.timeoffsets import starts_at
from kstream.plan.fingerprint import PlanFingerprint
from kstream.protocol.messages import Message
from kstream.protocol.recovery import RecoveredState, recover
from kstream.rescale.savepoint import rescaler

log = logging.getLogger(__name__)


def recover_start(
    store: CheckpointStore,
    job: JobConfig,
    history: list[Message],
    plan: PlanFingerprint | None,
    description: dict[str, Any] | None,
    now: float,
) -> RecoveredState:
    """The coordinator's state at start from the control topic's ``history`` and the
    store; the plan published. IncompatibleStateError if the state the job restores does
    not fit ``description`` (the plan's operators)."""
    known = known_completed(store, job.app_id, _candidate_ids(history))
    recovered = recover(history, known, latest_completed(store, job.app_id, known))
    recovered.retained = readable_checkpoints(store, job.app_id, known)  # (not listed)
    if plan is not None:
        publish_plan(store, job.app_id, plan)
    if description is not None:
        recovered = _start_state(store, job, history, recovered, description, now)
    return recovered


def _candidate_ids(history: Sequence[Message]) -> set[int]:
    """Checkpoint ids the control topic says may have completed: the newest announced one
    and those triggered after it (their metadata may exist, the announcement lost)."""
    st = recover(history, (), None)
    return {*st.in_flight, *([st.announced_id] if st.announced_id else [])}


def _start_state(
    store: CheckpointStore,
    job: JobConfig,
    history: list[Message],
    recovered: RecoveredState,
    description: dict[str, Any],
    now: float,
) -> RecoveredState:
    """The recovered state once ``job.start``'s checkpoint or savepoint is imported (if
    any); IncompatibleStateError if the state the job restores does not fit its plan."""
    next_id = recovered.max_checkpoint_id + 1
    imported = import_start(
        store,
        job.app_id,
        job.start,
        next_id=next_id,
        attempt=recovered.attempt,
        description=description,
        now=now,
        rescale=rescaler(store, job.app_id, next_id, new_positions=starts_at(job)),
    )
    if imported is not None:
        # Restored like the job's latest checkpoint, by a new attempt at once — also when
        # the control topic says the job was running (its previous version's attempt).
        known = known_completed(store, job.app_id, _candidate_ids(history))
        rec = recover(history, known, imported)
        rec.starting_from = f"job start from {imported.origin}"
        # Never announced: no running sink may publish an epoch up to the imported id.
        rec.announced_id = imported.checkpoint_id
        return rec
    latest = recovered.latest_completed
    if latest is not None:
        where = f"checkpoint {latest.checkpoint_id}"
        check_state(latest, where, description, job.start.allow_non_restored_state)
    return recovered
