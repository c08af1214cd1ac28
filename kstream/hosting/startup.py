"""The start-up checks of every process that runs a job, and what its coordinator is given.

`kstream run`, `kstream worker` (with the elected coordinator or with
``--coordinator external``) and `kstream coordinator` start a job the same way
(issue 37: they used to differ):

1. :func:`check_start` — before anything is started or written: the checkpoint
   store answers; the state ``--from-checkpoint``/``--from-savepoint`` names exists
   (unless this app imported it already) and fits the plan; without such a flag,
   the job's latest completed checkpoint fits the plan (:mod:`kstream.plan.compat`).
   A failure is a :class:`StartRefused` carrying its one-line reason and exit code.
2. :func:`coordinate` — wherever a coordinator runs (its own process, a thread of
   `kstream run`, the elected one of a worker), it gets the same :class:`Coordination`:
   the tasks that must acknowledge, the plan's fingerprint, and the operator
   description every checkpoint carries and every restore is checked against.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kstream.checkpointstorage.base import CheckpointStore, StoreError
from kstream.checkpointstorage.layout import control_key_path
from kstream.checkpointstorage.metadata import MetadataError, latest_completed
from kstream.checkpointstorage.startfrom import check_state, pending_import, start_label
from kstream.checkpointstorage.urls import open_store
from kstream.config import JobConfig
from kstream.hosting.coordinator import EXIT_FAILED, EXIT_USAGE, run_coordinator
from kstream.plan import JobPlan
from kstream.plan.compat import IncompatibleStateError
from kstream.plan.fingerprint import PlanFingerprint, fingerprint
from kstream.plan.operators import describe

__all__ = ["Coordination", "StartRefused", "check_start", "coordinate"]


class StartRefused(Exception):
    """The job must not start: ``str(self)`` says why (one line), ``code`` is the exit code
    (1: the store fails; 2: a configuration or a state that does not fit the plan)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Coordination:
    """What a job's coordinator needs of the plan; ``plan``/``description`` are None only
    for `kstream coordinator --tasks` (no topology: nothing to compare with)."""

    expected_tasks: frozenset[str]
    plan: PlanFingerprint | None = None
    description: dict[str, Any] | None = None

    @classmethod
    def of(cls, plan: JobPlan) -> Coordination:
        return cls(plan.expected_tasks, fingerprint(plan), describe(plan))


def coordinate(job: JobConfig, coordination: Coordination, **kwargs: Any) -> int:
    """:func:`kstream.hosting.coordinator.run_coordinator` for ``coordination``'s plan
    (``kwargs``: its other arguments); the exit code."""
    return run_coordinator(
        job,
        coordination.expected_tasks,
        plan=coordination.plan,
        description=coordination.description,
        **kwargs,
    )


def check_start(
    job: JobConfig,
    description: Mapping[str, Any] | None,
    store: CheckpointStore | None = None,
) -> None:
    """Raise :class:`StartRefused` if ``job`` cannot start (module doc, step 1).

    ``description`` is the plan's (None: not checked). Without checkpointing there is
    no checkpoint to restore, and unless the run is bounded (its final state is in the
    store) no store to ask.
    """
    if not job.checkpointing.enabled and not job.bounded:
        return
    try:
        # 1. The store answers (a listing: a missing bucket is an error, not an empty
        #    answer as a missing object would be).
        store = store or open_store(job.store_url, job.store_options)
        store.list(control_key_path(job.app_id))
    except StoreError as e:
        raise StartRefused(f"the checkpoint store cannot be used: {e}", EXIT_FAILED) from e
    if description is None or not job.checkpointing.enabled:
        return
    # 2. The state the job starts from: the one a flag names (until this app imported
    #    it), else its latest completed checkpoint.
    try:
        try:
            pending = pending_import(store, job.app_id, job.start)
        except MetadataError as e:
            raise StartRefused(
                f"cannot start from {start_label(job.app_id, job.start)}: {e} (see `kstream "
                "checkpoints list` or `kstream savepoints list`)",
                EXIT_USAGE,
            ) from e
        rescale = pending is not None  # an imported state is rescaled to this plan's counts
        if pending is None:
            latest = latest_completed(store, job.app_id)
            if latest is None:
                return
            pending = f"checkpoint {latest.checkpoint_id}", latest
        label, meta = pending
        check_state(meta, label, description, job.start.allow_non_restored_state, rescale=rescale)
    except IncompatibleStateError as e:
        raise StartRefused(str(e), EXIT_USAGE) from e
    except StoreError as e:
        raise StartRefused(f"the checkpoint store cannot be used: {e}", EXIT_FAILED) from e
