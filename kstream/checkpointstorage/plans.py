"""Plan descriptions in the checkpoint store: ``<app>/plans/<digest>.json``.

Content-addressed and immutable: the same digest always has the same parts, so
every process writes its own once at start (an existing one is left alone), and a
process refusing another's plan reads that one to say what differs.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping

from kstream.checkpointstorage.base import CheckpointStore, ObjectExists, StoreError
from kstream.checkpointstorage.layout import plan_path
from kstream.plan.fingerprint import PlanFingerprint, describe_difference

log = logging.getLogger(__name__)


def publish_plan(store: CheckpointStore, app_id: str, plan: PlanFingerprint) -> None:
    """Write ``plan``'s description unless it is there (a failure is logged, not raised:
    it only costs the detail of a later mismatch message)."""
    path = plan_path(app_id, plan.digest)
    try:
        store.put_bytes(path, json.dumps(plan.to_json(), sort_keys=True).encode(), exclusive=True)
    except ObjectExists:
        pass
    except StoreError as e:
        log.warning("cannot store the plan description %s: %s", path, e)


def plan_parts(store: CheckpointStore, app_id: str, digest: str) -> Mapping[str, str] | None:
    """The parts of plan ``digest`` as stored, or None if absent or unreadable."""
    try:
        fp = PlanFingerprint.from_json(json.loads(store.get_bytes(plan_path(app_id, digest))))
    except (StoreError, ValueError):
        return None
    return fp.parts if fp is not None and fp.digest == digest else None


def plan_refusal(
    store: CheckpointStore, app_id: str, mine: PlanFingerprint, theirs: str, attempt: int
) -> str:
    """Why a worker running plan ``mine`` refuses the Restore of ``attempt`` by a
    coordinator of ``app_id`` running plan ``theirs``, saying what differs."""
    detail = describe_difference(mine.parts, plan_parts(store, app_id, theirs))
    return (
        f"this worker runs plan {mine.digest}, the coordinator of {app_id!r} plan {theirs} "
        f"(attempt {attempt}): {detail}. Every process of an app must run the same "
        "topology; deploy it everywhere or use a new app id"
    )
